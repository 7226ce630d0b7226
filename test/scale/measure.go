package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/egressd/egressd/test/agent"
)

// progress prints line() every 5 s until the returned stop is called.
func progress(w io.Writer, line func() string) (stop func()) {
	done := make(chan struct{})
	t := time.NewTicker(5 * time.Second)
	go func() {
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintln(w, "  "+line())
			}
		}
	}()
	return func() { close(done) }
}

// metrics is one scrape of a process's /metrics: series (name and labels as exposed) -> value.
type metrics map[string]float64

func scrape(p *agent.Process) (metrics, error) {
	code, body, err := p.Get("/metrics")
	if err != nil {
		return nil, err
	}
	if code != 200 {
		return nil, fmt.Errorf("%s /metrics: %d", p.Node, code)
	}
	m := metrics{}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m, nil
}

// sum adds the series of family name (with any labels) whose labels contain every one of
// match (e.g. `feature="apply"`).
func (m metrics) sum(name string, match ...string) float64 {
	var total float64
	for k, v := range m {
		rest, ok := strings.CutPrefix(k, name)
		if !ok || (rest != "" && rest[0] != '{') {
			continue
		}
		if !containsAll(rest, match) {
			continue
		}
		total += v
	}
	return total
}

// delta is, per value of label, how much family name's series grew since before.
func (m metrics) delta(before metrics, name, label string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		rest, ok := strings.CutPrefix(k, name+"{")
		if !ok {
			continue
		}
		_, value, ok := strings.Cut(rest, label+`="`)
		if !ok {
			continue
		}
		value, _, _ = strings.Cut(value, `"`)
		out[value] += v - before[k]
	}
	return out
}

func containsAll(s string, subs []string) bool {
	for _, m := range subs {
		if !strings.Contains(s, m) {
			return false
		}
	}
	return true
}

// usage is what the harness reads of a process at one instant.
type usage struct {
	rss, heap, cpu float64 // bytes, bytes, CPU seconds
	// What of the RSS the Go runtime accounts for (bytes): the heap's objects (live and not yet
	// collected), its spans kept free but not returned to the system, goroutine stacks, and its
	// own metadata.
	objects, kept, stacks, runtime float64
}

// composition says where a process's RSS goes: the heap's spans in use (of which objects,
// the rest room left in spans), free spans the runtime keeps, stacks, the runtime's metadata
// (what it reserved: an upper bound), and what is left (the mapped binary and whatever the
// runtime does not count; understated by as much as the metadata is not resident).
func (u usage) composition() string {
	rest := u.rss - u.heap - u.kept - u.stacks - u.runtime
	return fmt.Sprintf("heap spans in use %s (objects %s), free spans kept %s, stacks %s, runtime metadata (reserved, not all resident) %s, rest %s",
		mb(u.heap), mb(u.objects), mb(u.kept), mb(u.stacks), mb(u.runtime), mb(rest))
}

func read(p *agent.Process) (usage, error) {
	m, err := scrape(p)
	if err != nil {
		return usage{}, err
	}
	return usage{rss: m["process_resident_memory_bytes"], heap: m["go_memstats_heap_inuse_bytes"], cpu: m["process_cpu_seconds_total"],
		objects: m["go_memstats_heap_alloc_bytes"], kept: m["go_memstats_heap_idle_bytes"] - m["go_memstats_heap_released_bytes"],
		stacks:  m["go_memstats_stack_inuse_bytes"],
		runtime: m["go_memstats_mspan_inuse_bytes"] + m["go_memstats_mcache_inuse_bytes"] + m["go_memstats_buck_hash_sys_bytes"] + m["go_memstats_gc_sys_bytes"] + m["go_memstats_other_sys_bytes"]}, nil
}

// quantiles of ds: min, median, p99 (nearest rank), max.
func quantiles(ds []time.Duration) (lo, med, p99, hi time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(q float64) time.Duration {
		i := int(q*float64(len(s))+0.999999) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return s[0], rank(0.5), rank(0.99), s[len(s)-1]
}

func mb(b float64) string { return fmt.Sprintf("%.1f MB", b/1e6) }

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/1e6) }
