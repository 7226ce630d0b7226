package main

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressd/egressd/dataplane/classifier"
	"github.com/egressd/egressd/test/lab"
)

// steadyState measures the agent's and the controller's CPU over h.steady on the settled
// cluster (unsettled: statuses not all applied yet, which the lines say), the
// cost of one sync (every sync recomputes the node's whole state: a full resync), and their
// memory afterwards.
func (h *harness) steadyState(ctx context.Context, agents0 []usage, ctl0 usage, settled bool) error {
	h.logf("steady cluster: %s", h.steady)
	steady := "steady cluster"
	if !settled {
		steady = "cluster not settled (statuses pending)"
	}
	a := h.lab.Nodes[0].Agent
	wctx, stopWatches := context.WithCancel(ctx)
	defer stopWatches()
	typical := h.lab.Nodes[len(h.lab.Nodes)-1] // hosts no egress IP
	events, err := countWatchEvents(wctx, h.meta, typical.Name)
	if err != nil {
		return err
	}
	reqA0, err := dispatched(ctx, h.c.kube, agentFlow)
	if err != nil {
		return err
	}
	reqC0, err := dispatched(ctx, h.c.kube, controllerFlow, leaseFlow)
	if err != nil {
		return err
	}
	m0, err := scrape(a)
	if err != nil {
		return err
	}
	as1, c1, err := h.usage()
	if err != nil {
		return err
	}
	a1 := as1[0]
	h.cpuProfile(h.steady)
	seen := events()
	reqA1, err := dispatched(ctx, h.c.kube, agentFlow)
	if err != nil {
		return err
	}
	reqC1, err := dispatched(ctx, h.c.kube, controllerFlow, leaseFlow)
	if err != nil {
		return err
	}
	m1, err := scrape(a)
	if err != nil {
		return err
	}
	as2, c2, err := h.usage()
	if err != nil {
		return err
	}
	a2 := as2[0]
	secs := h.steady.Seconds()
	h.record("API server: watch events to an agent of a node hosting no egress IP, "+steady, eventRates(seen, secs), "")
	h.record("API server: requests per agent, "+steady, fmt.Sprintf("%.2f/s", (reqA1-reqA0)/float64(len(h.lab.Nodes))/secs), "")
	h.record("API server: requests of the controller, "+steady, fmt.Sprintf("%.2f/s", (reqC1-reqC0)/secs), "")
	h.record("agent CPU, "+steady, fmt.Sprintf("%.2f%% of a core", 100*(a2.cpu-a1.cpu)/secs), "< 1%")
	h.record("controller CPU, "+steady, fmt.Sprintf("%.2f%% of a core", 100*(c2.cpu-c1.cpu)/secs), "")
	syncs := m1.sum("egressd_sync_duration_seconds_count", `feature="apply"`) - m0.sum("egressd_sync_duration_seconds_count", `feature="apply"`)
	h.record("agent syncs (full recompute + apply), "+steady, fmt.Sprintf("%.2f/s", syncs/secs), "")
	if syncs == 0 {
		h.record("agent full resync (one sync: compile + apply)", "none in the steady minute (the change trials time syncs)", "")
	} else {
		per := (m1.sum("egressd_sync_duration_seconds_sum") - m0.sum("egressd_sync_duration_seconds_sum")) / syncs
		apply := (m1.sum("egressd_sync_duration_seconds_sum", `feature="apply"`) - m0.sum("egressd_sync_duration_seconds_sum", `feature="apply"`)) / syncs
		h.record("agent full resync (one sync: compile + apply)", fmt.Sprintf("%s (apply %s)", ms(time.Duration(per*1e9)), ms(time.Duration(apply*1e9))), "")
		// What a sync's time goes to: each feature's compile, and the apply's facilities.
		h.record("agent sync, by step (largest first)", perSync(m1.delta(m0, "egressd_sync_duration_seconds_sum", "feature"), syncs), "")
		h.record("agent apply, by facility (largest first)", perSync(m1.delta(m0, "egressd_dataplane_apply_phase_duration_seconds_sum", "phase"), syncs), "")
	}
	pods := float64(h.s.Pods + h.s.RealNodes*h.s.LabPods)
	for i, a := range as2 {
		role := "egress node, its EgressIPs' pods served"
		if i > 0 {
			role = "node hosting no egress IP"
		}
		h.record(fmt.Sprintf("agent RSS, full cluster (%s)", role), mb(a.rss), "<= 250 MB")
		h.record(fmt.Sprintf("agent RSS per cluster pod above empty (%s)", role), fmt.Sprintf("%.2f KB", (a.rss-agents0[i].rss)/pods/1e3), "<= 1 KB")
		h.record(fmt.Sprintf("agent Go heap in use per cluster pod (%s)", role), fmt.Sprintf("%.2f KB", (a.heap-agents0[i].heap)/pods/1e3), "")
		h.record(fmt.Sprintf("agent RSS, where it goes (%s)", role), a.composition(), "")
	}
	h.record("controller RSS, full cluster", mb(c2.rss), "")
	h.record("controller RSS per cluster pod above empty", fmt.Sprintf("%.2f KB", (c2.rss-ctl0.rss)/pods/1e3), "<= 1 KB")
	return h.heapProfiles()
}

// changeLatency edits the EgressFirewall of a namespace with a pod on the first real node,
// adding and removing a last rule in turn, and times each edit until that node's kernel holds
// the change: the rule's text in the classifier's pinned egressd_fw_rules, which the agent
// writes after the entries that enforce the rule and removes after them. Reading one map entry
// costs the agent nothing; polling its /metrics every few milliseconds cost it a sixth of its
// CPU (each scrape walks the per-rule counters).
func (h *harness) changeLatency(ctx context.Context) error {
	node := h.lab.Nodes[0]
	a := node.Agent
	efs := h.c.ovn.K8sOVNV1().EgressFirewalls(nsName(0))
	in, err := classifier.Inspect(lab.PinRoot(h.lab.ID, node.Name))
	if err != nil {
		return err
	}
	defer in.Close()
	last := len(firewallRules(0, 0)) // the index of the rule the trials add and remove
	m, err := scrape(a)
	if err != nil {
		return err
	}
	h.logf("EgressFirewall change trials: %d (node holds %.0f rules)", h.trials, m.sum("egressd_egressfirewall_rules"))
	// The trials' first 30 s: most of them at the targeted latency.
	defer h.profileFor(30*time.Second, "profile", "agent-"+node.Name+".trials.cpu.pprof", "the egress node's agent during the change trials", a.Profile)()
	defer h.profileFor(5*time.Second, "trace", "agent-"+node.Name+".trials.trace", "the egress node's agent during the change trials", a.Profile)()
	var lat, accepted []time.Duration
	budget := time.Now().Add(h.wait)
	unfinished := "" // the trial the budget cut short
trials:
	for t := 0; t < h.trials && time.Now().Before(budget); t++ {
		extra := (t + 1) % 2
		ef, err := efs.Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			return err
		}
		ef.Spec.Egress = firewallRules(0, extra)
		begin := time.Now()
		if _, err := efs.Update(ctx, ef, metav1.UpdateOptions{}); err != nil {
			if apierrors.IsConflict(err) { // the controller's status write raced this edit: the same trial again
				t--
				continue
			}
			return err
		}
		accepted = append(accepted, time.Since(begin))
		for {
			_, ok, err := in.FirewallRule(nsName(0), last)
			if err != nil {
				return err
			}
			if ok == (extra == 1) {
				break
			}
			if time.Now().After(budget) {
				unfinished = fmt.Sprintf("; one more not programmed after %s", time.Since(begin).Round(time.Second))
				break trials
			}
			time.Sleep(time.Millisecond)
		}
		lat = append(lat, time.Since(begin))
		time.Sleep(200 * time.Millisecond)
	}
	m1, err := scrape(a)
	if err != nil {
		return err
	}
	if n := m1.sum("egressd_programming_latency_seconds_count") - m.sum("egressd_programming_latency_seconds_count"); n > 0 {
		mean := (m1.sum("egressd_programming_latency_seconds_sum") - m.sum("egressd_programming_latency_seconds_sum")) / n
		h.record("agent's own programming latency over the trials (mean)", ms(time.Duration(mean*1e9)), "")
	}
	if syncs := m1.sum("egressd_sync_duration_seconds_count", `feature="apply"`) - m.sum("egressd_sync_duration_seconds_count", `feature="apply"`); syncs > 0 {
		h.record(fmt.Sprintf("agent sync during the trials, by step (%.0f syncs)", syncs), perSync(m1.delta(m, "egressd_sync_duration_seconds_sum", "feature"), syncs), "")
		h.record("agent apply during the trials, by facility", perSync(m1.delta(m, "egressd_dataplane_apply_phase_duration_seconds_sum", "phase"), syncs), "")
	}
	what := fmt.Sprintf("EgressFirewall change -> enforced on a node (%d of %d trials within %s)", len(lat), h.trials, h.wait)
	if len(lat) == 0 {
		h.record(what, "none"+unfinished, "p99 <= 100 ms")
		return nil
	}
	lo, med, p99, hi := quantiles(lat)
	alo, amed, ap99, ahi := quantiles(accepted)
	h.record(what, fmt.Sprintf("min %s, median %s, p99 %s, max %s (seen in the kernel's map)%s",
		ms(lo), ms(med), ms(p99), ms(hi), unfinished), "p99 <= 100 ms")
	h.record("of which the API server accepting the edit", fmt.Sprintf("min %s, median %s, p99 %s, max %s", ms(alo), ms(amed), ms(ap99), ms(ahi)), "")
	return nil
}

// perSync lists each part's time per sync, largest first.
func perSync(sums map[string]float64, syncs float64) string {
	var out []string
	for _, k := range slices.SortedFunc(maps.Keys(sums), func(a, b string) int { return cmp.Compare(sums[b], sums[a]) }) {
		out = append(out, fmt.Sprintf("%s %s", k, ms(time.Duration(sums[k]/syncs*1e9))))
	}
	return strings.Join(out, ", ")
}
