package e2e

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/privileged"
)

// BenchmarkPrivilegedCNIAdd measures what egressd-cni adds to a pod's CNI ADD: the time of the
// plugin (process start, egressd compiling and applying a sync that holds the pod) and of the
// whole chain, p50 and p99 over 200 pods created in parallel on a routed node, first on an
// otherwise empty node, then with 1000 namespaces holding EgressFirewalls. 16 at a time (a busy
// kubelet) saturates this machine's two cores with the chain's processes alone; 4 at a time
// does not; one at a time shows what an ADD costs on a quiet node. On the empty node, each is
// also measured with test/cnifloor in egressd-cni's place: a Go plugin on the official skel
// that only returns prevResult, the least a chained plugin adds at that load. Run with: make
// bench-cni.
func BenchmarkPrivilegedCNIAdd(b *testing.B) {
	privileged.Require(b)
	// EGRESSD_BENCH_PROFILE=dir: the agent's CPU profile during each measurement goes there.
	profiles := os.Getenv("EGRESSD_BENCH_PROFILE")
	o := lab.Options{Nodes: 1, Agents: true}
	if profiles != "" {
		o.AgentArgs = []string{"--profiling"}
	}
	l := lab.New(b, o)
	// floor: test/cnifloor in egressd-cni's place, a plugin that only returns prevResult.
	measure := func(what string, parallel int, floor bool) {
		what = fmt.Sprintf("%s, %d at a time", what, parallel)
		plugin := "egressd-cni"
		if floor {
			what, plugin = what+", cnifloor", "cnifloor"
		}
		unit := strings.NewReplacer(" ", "-", ",", "").Replace(what)
		if profiles != "" {
			go func() {
				prof, err := l.Nodes[0].Agent.Profile("profile?seconds=10", 20*time.Second)
				if err == nil {
					err = os.WriteFile(filepath.Join(profiles, "egressd-cni-add-"+unit+".pprof"), prof, 0o644)
				}
				if err != nil {
					b.Error(err)
				}
			}()
		}
		before := addBuckets(b, l.Nodes[0])
		stepsBefore := syncSteps(b, l.Nodes[0])
		ns := l.CP.Namespace(b)
		const pods = 200
		var mu sync.Mutex
		var took, chain, without []time.Duration
		var added []*lab.Pod
		work := make(chan int)
		var wg sync.WaitGroup
		for range parallel {
			wg.Go(func() {
				for i := range work {
					p, err := l.Nodes[0].AddPod(context.Background(), ns, fmt.Sprintf("p%d", i), lab.PodOptions{Labels: map[string]string{"app": "bench"}, CNIFloor: floor})
					if err != nil {
						b.Error(err)
						continue
					}
					mu.Lock()
					added = append(added, p)
					took = append(took, p.CNIPlugins[plugin+" ADD"])
					chain = append(chain, p.CNIAdd)
					without = append(without, p.CNIAdd-p.CNIPlugins[plugin+" ADD"])
					mu.Unlock()
				}
			})
		}
		for i := range pods {
			work <- i
		}
		close(work)
		wg.Wait()
		if len(took) != pods {
			b.Fatalf("%d of %d pods added", len(took), pods)
		}
		q := func(ds []time.Duration, f float64) time.Duration {
			s := slices.Clone(ds)
			slices.Sort(s)
			return s[min(len(s)-1, int(f*float64(len(s))))]
		}
		// egressd's own share, from its histogram (the plugin adds its process start-up).
		served := bucketDeltas(before, addBuckets(b, l.Nodes[0]))
		b.Logf("%s, over %d pods: %s p50 %s p99 %s (egressd answering: p50 %s p99 %s); whole chain p50 %s p99 %s; chain without it p50 %s p99 %s",
			what, pods, plugin, q(took, .5), q(took, .99), served.quantile(.5), served.quantile(.99), q(chain, .5), q(chain, .99), q(without, .5), q(without, .99))
		if !floor {
			b.Logf("%s: egressd answered %.0f of %d within 5 ms (the target of one at a time: 99%%)", what, served.within(.005), pods)
		}
		b.Logf("%s: mean time per sync step: %s", what, stepMeans(stepsBefore, syncSteps(b, l.Nodes[0])))
		var sources []string
		for _, src := range []string{"informer", "api", "none"} {
			v, _ := l.Nodes[0].Agent.Sample(`egressd_cni_pod_objects_total{source="` + src + `"}`)
			sources = append(sources, src+" "+v)
		}
		b.Logf("%s: Pod objects of the ADDs so far, by source: %s", what, strings.Join(sources, ", "))
		if !floor {
			b.ReportMetric(float64(served.quantile(.5).Microseconds())/1000, "egressd-p50-ms-"+unit)
			b.ReportMetric(float64(served.quantile(.99).Microseconds())/1000, "egressd-p99-ms-"+unit)
		}
		b.ReportMetric(float64(q(took, .5).Microseconds())/1000, "plugin-p50-ms-"+unit)
		b.ReportMetric(float64(q(took, .99).Microseconds())/1000, "plugin-p99-ms-"+unit)
		b.ReportMetric(float64(q(chain, .99).Microseconds())/1000, "add-p99-ms-"+unit)
		for _, p := range added { // the node's address range holds 254
			if err := p.Delete(context.Background()); err != nil {
				b.Error(err)
			}
		}
		// The next measurement starts on a quiet node: the agent's syncs for 200 deleted pods
		// (and the kernel tearing their namespaces down) otherwise land among its first ADDs.
		quiet(b, l.Nodes[0], what)
	}
	for _, parallel := range []int{16, 4, 1} {
		measure("empty node", parallel, true)
		measure("empty node", parallel, false)
	}
	start := time.Now()
	firewalledNamespaces(b, l, 1000, "bench-cni")
	waitFirewallsApplied(b, l)
	b.Logf("1000 namespaces with EgressFirewalls created and applied in %s", time.Since(start).Round(time.Millisecond))
	measure("1000 firewalls", 16, false)
	measure("1000 firewalls", 4, false)
	measure("1000 firewalls", 1, false)
}

// quiet waits until the node's agent has not synced for two seconds, for at most a minute.
func quiet(b *testing.B, n *lab.Node, after string) {
	b.Helper()
	const series = `egressd_sync_duration_seconds_count{feature="apply"}`
	start, last, since := time.Now(), "", time.Now()
	for time.Since(start) < time.Minute {
		v, err := n.Agent.Sample(series)
		if err != nil {
			b.Fatal(err)
		}
		if v != last {
			last, since = v, time.Now()
		}
		if time.Since(since) >= 2*time.Second {
			b.Logf("%s: the node was quiet again %s after its pods' deletion", after, since.Sub(start).Round(10*time.Millisecond))
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	b.Logf("%s: the node's agent still synced a minute after its pods' deletion; measuring on", after)
}

// stepTotal is a histogram's sum (seconds) and count.
type stepTotal struct{ sum, count float64 }

// syncSteps reads the agent's histograms of its sync steps: the compile of each feature, the
// apply, and each phase of the apply.
func syncSteps(b *testing.B, n *lab.Node) map[string]stepTotal {
	b.Helper()
	_, body, err := n.Agent.Get("/metrics")
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]stepTotal{}
	for _, line := range strings.Split(body, "\n") {
		for _, m := range []struct{ prefix, label, step string }{
			{"egressd_sync_duration_seconds", "feature", "compile "},
			{"egressd_dataplane_apply_phase_duration_seconds", "phase", "apply "},
		} {
			rest, ok := strings.CutPrefix(line, m.prefix)
			if !ok {
				continue
			}
			kind, rest, _ := strings.Cut(rest, "{"+m.label+`="`)
			name, value, _ := strings.Cut(rest, `"} `)
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				continue
			}
			step := m.step + name
			if step == "compile apply" {
				step = "apply"
			}
			t := out[step]
			switch kind {
			case "_sum":
				t.sum = v
			case "_count":
				t.count = v
			}
			out[step] = t
		}
	}
	return out
}

// stepMeans prints the mean duration of each step between two readings, and how many syncs ran.
func stepMeans(before, after map[string]stepTotal) string {
	var names []string
	for name := range after {
		names = append(names, name)
	}
	slices.Sort(names)
	var parts []string
	for _, name := range names {
		n := after[name].count - before[name].count
		if n == 0 {
			continue
		}
		mean := time.Duration((after[name].sum - before[name].sum) / n * float64(time.Second))
		parts = append(parts, fmt.Sprintf("%s %s (%d)", name, mean.Round(10*time.Microsecond), int(n)))
	}
	return strings.Join(parts, ", ")
}

// buckets are the cumulative counts of a histogram by upper bound (seconds), ascending.
type buckets []struct {
	le    float64
	count float64
}

// addBuckets reads the agent's histogram of the ADDs it programmed.
func addBuckets(b *testing.B, n *lab.Node) buckets {
	b.Helper()
	_, body, err := n.Agent.Get("/metrics")
	if err != nil {
		b.Fatal(err)
	}
	var out buckets
	prefix := `egressd_cni_add_duration_seconds_bucket{result="programmed",le="`
	for _, line := range strings.Split(body, "\n") {
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		le, count, _ := strings.Cut(rest, `"} `)
		var x struct {
			le    float64
			count float64
		}
		x.le, _ = strconv.ParseFloat(le, 64) // +Inf parses
		x.count, _ = strconv.ParseFloat(count, 64)
		out = append(out, x)
	}
	return out
}

// bucketDeltas are the counts that after holds beyond before (before empty: none yet).
func bucketDeltas(before, after buckets) buckets {
	out := slices.Clone(after)
	for i := range out {
		if i < len(before) {
			out[i].count -= before[i].count
		}
	}
	return out
}

// within is the count of the bucket bounded by le (0 when no bucket is).
func (bs buckets) within(le float64) float64 {
	for _, x := range bs {
		if x.le == le {
			return x.count
		}
	}
	return 0
}

// quantile estimates the q-quantile as Prometheus' histogram_quantile does: linear within the
// bucket that holds it.
func (bs buckets) quantile(q float64) time.Duration {
	if len(bs) == 0 || bs[len(bs)-1].count == 0 {
		return 0
	}
	rank := q * bs[len(bs)-1].count
	lower, below := 0.0, 0.0
	for _, x := range bs {
		if x.count >= rank {
			if math.IsInf(x.le, 1) {
				return time.Duration(lower * float64(time.Second))
			}
			return time.Duration((lower + (x.le-lower)*(rank-below)/(x.count-below)) * float64(time.Second))
		}
		lower, below = x.le, x.count
	}
	return 0
}
