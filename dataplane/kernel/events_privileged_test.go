package kernel_test

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/kernel"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedApplierWatchesAgainAfterLostEvents: a burst of changes overruns the event
// sockets (given the kernel's smallest buffer here) and events are lost; the applier counts it,
// subscribes again, and sees the changes after the burst: an admin's address added then
// triggers a sync and reaches HostCIDRs.
func TestPrivilegedApplierWatchesAgainAfterLostEvents(t *testing.T) {
	privileged.Require(t)
	// The kernel raises it to its minimum: a few messages. (Restored after the applier closed.)
	t.Cleanup(kernel.SetEventBuffer(1))
	l := newLab(t)
	a := l.applier(t)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(a.Collectors()...)
	state := fullState()
	state.Addresses = nil
	l.mustApply(t, a, state)
	// A burst of 600 address events from another process while the agent's threads are busy
	// (a burst of pods on a busy node): the events queue up beyond the buffer.
	batch := []string{"link add burst0 type bridge"}
	for i := range 300 {
		batch = append(batch, fmt.Sprintf("addr add 198.19.%d.%d/32 dev burst0", i/250, i%250+1))
	}
	batch = append(batch, "link del burst0")
	file := filepath.Join(t.TempDir(), "burst")
	if err := os.WriteFile(file, []byte(strings.Join(batch, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	func() {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
		busy := make(chan struct{})
		defer close(busy)
		go func() {
			for {
				select {
				case <-busy:
					return
				default:
				}
			}
		}()
		l.node.MustRun(t, "ip", "-batch", file)
	}()
	poll.Eventually(t, "the overrun is counted", 5*time.Second, func() error {
		if counter(t, reg, "egressd_kernel_events_lost_total") == 0 {
			return errors.New("no subscription lost yet")
		}
		return nil
	})
	quiet(a) // the burst's last events and the resubscriptions' syncs are through
	t.Logf("subscriptions lost in the burst: %v", counter(t, reg, "egressd_kernel_events_lost_total"))
	admin := netip.MustParsePrefix("198.18.0.1/24")
	l.node.MustRun(t, "ip", "addr", "add", admin.String(), "dev", "ext0")
	select {
	case <-a.Changed():
	case <-time.After(5 * time.Second):
		t.Fatal("no change signalled for an address added after the burst: the events are no longer watched")
	}
	if res := l.apply(t, a, state); !slices.Contains(res.HostCIDRs, admin) {
		t.Errorf("HostCIDRs %v lack %s, added to the node before this Apply", res.HostCIDRs, admin)
	}
}

// counter reads a counter of the applier's metrics.
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no %s among the applier's metrics", name)
	return 0
}

// TestPrivilegedApplierAttachesAgainAfterQdiscDeleted: the clsact qdisc of a pod's interface
// deleted behind egressd's back (its filters with it) triggers a sync that attaches them again,
// without waiting for the next look at the hooks a minute on.
func TestPrivilegedApplierAttachesAgainAfterQdiscDeleted(t *testing.T) {
	privileged.Require(t)
	l, a, reg, state := appliedLab(t)
	first := time.Now()
	l.node.MustRun(t, "tc", "qdisc", "del", "dev", "pod0", "clsact")
	if got := l.ingressPrograms(t, "pod0"); len(got) != 0 {
		t.Fatalf("ingress of pod0 runs %q after its qdisc was deleted", got)
	}
	select {
	case <-a.Changed():
	case <-time.After(5 * time.Second):
		t.Fatal("no sync asked for after egressd's filters were deleted")
	}
	l.mustApply(t, a, state)
	for _, dir := range []string{"ingress", "egress"} {
		if got := l.node.MustRun(t, "tc", "filter", "show", "dev", "pod0", dir); !strings.Contains(got, "pref 49152") || !strings.Contains(got, "egressd_") {
			t.Errorf("%s of pod0 after the sync:\n%s\nwant egressd's filter again", dir, got)
		}
	}
	if n := counter(t, reg, "egressd_classifier_reattached_total"); n != 2 {
		t.Errorf("egressd_classifier_reattached_total %v, want 2 (ingress and egress of pod0)", n)
	}
	// Deleted again at once (a tool that keeps deleting them): the sync it asks for waits out
	// the second since the last.
	l.node.MustRun(t, "tc", "qdisc", "del", "dev", "pod0", "clsact")
	select {
	case <-a.Changed():
		if since := time.Since(first); since < 950*time.Millisecond {
			t.Errorf("a second deletion asked for a sync %s after the first, want a second at least", since)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no sync asked for after egressd's filters were deleted again")
	}
	l.mustApply(t, a, state)
	if got := l.ingressPrograms(t, "pod0"); len(got) != 1 {
		t.Errorf("ingress of pod0 runs %q after the second deletion's sync, want egressd's filter", got)
	}
	// egressd's own detaching (the pod gone, its interface still there) is no news.
	quiet(a)
	none := *state // a state handed to Apply is read only
	none.Classifier.Pods = nil
	l.mustApply(t, a, &none)
	if got := l.ingressPrograms(t, "pod0"); len(got) != 0 {
		t.Fatalf("ingress of pod0 runs %q once no pod is behind it", got)
	}
	select {
	case <-a.Changed():
		t.Error("egressd's own detaching asked for a sync")
	case <-time.After(500 * time.Millisecond):
	}
}

// quiet waits until the applier has asked for no sync for half a second.
func quiet(a *kernel.Applier) {
	for {
		select {
		case <-a.Changed():
		case <-time.After(500 * time.Millisecond):
			return
		}
	}
}

// TestPrivilegedApplierWritesItsTableAgain: egressd's nftables table deleted behind its back
// (`nft flush ruleset` elsewhere) is found at the next look, counted, and written again by the
// sync it asks for at once (Urgent).
func TestPrivilegedApplierWritesItsTableAgain(t *testing.T) {
	privileged.Require(t)
	t.Cleanup(kernel.SetTableCheck(100 * time.Millisecond))
	l, a, reg, state := appliedLab(t)
	if n := counter(t, reg, "egressd_nftables_table_lost_total"); n != 0 {
		t.Fatalf("egressd_nftables_table_lost_total %v with the table whole", n)
	}
	l.node.MustRun(t, "nft", "flush", "ruleset")
	select {
	case <-a.Urgent():
	case <-time.After(5 * time.Second):
		t.Fatal("no sync asked for after egressd's table was flushed away")
	}
	if n := counter(t, reg, "egressd_nftables_table_lost_total"); n < 1 {
		t.Errorf("egressd_nftables_table_lost_total %v, want at least 1", n)
	}
	l.mustApply(t, a, state)
	if out, err := l.node.Run("nft", "list", "table", "inet", "egressd"); err != nil || !strings.Contains(out, "chain") {
		t.Errorf("after the sync: %v\n%s\nwant egressd's table again", err, out)
	}
}

// appliedLab is a lab whose applier applied fullState and has asked for no sync since, with its
// metrics registered.
func appliedLab(t *testing.T) (*lab, *kernel.Applier, *prometheus.Registry, *dataplane.State) {
	t.Helper()
	l := newLab(t)
	a := l.applier(t)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(a.Collectors()...)
	state := fullState()
	l.mustApply(t, a, state)
	quiet(a)
	return l, a, reg, state
}

// TestPrivilegedApplierFollowsRoutesToGateways: the route to the gateway of egressd's table
// changes in main (a more specific one through another interface, then gone again) while
// nothing in the state moves: each change asks for a sync, which moves the table's route to
// the gateway's interface of the moment. A route that reaches no gateway asks for none.
func TestPrivilegedApplierFollowsRoutesToGateways(t *testing.T) {
	privileged.Require(t)
	l, a, _, state := appliedLab(t)
	if err := l.node.Script("ip link add gw1 type veth peer name gw1p", "ip link set gw1p up", "ip link set gw1 up"); err != nil {
		t.Fatal(err)
	}
	quiet(a) // the link's own events
	tableRoute := func() string { return l.ip(t, "-4", "route", "show", "table", strconv.Itoa(table)) }
	l.node.MustRun(t, "ip", "route", "add", "198.18.7.0/24", "dev", "gw1")
	select {
	case <-a.Changed():
		t.Error("a route to no gateway of egressd's asked for a sync")
	case <-time.After(500 * time.Millisecond):
	}
	for _, step := range []struct{ change, dev string }{
		{"add", "gw1"}, // a more specific route takes the gateway to gw1
		{"del", "ext0"},
	} {
		l.node.MustRun(t, "ip", "route", step.change, extIP.String()+"/32", "dev", "gw1")
		select {
		case <-a.Changed():
		case <-time.After(5 * time.Second):
			t.Fatalf("no sync asked for after route %s %s/32 dev gw1 moved the gateway", step.change, extIP)
		}
		l.mustApply(t, a, state)
		if got := tableRoute(); !strings.Contains(got, "via "+extIP.String()+" dev "+step.dev) {
			t.Errorf("table %d after route %s %s/32 dev gw1:\n%s\nwant the default route via %s dev %s", table, step.change, extIP, got, extIP, step.dev)
		}
	}
}

// TestPrivilegedApplierReportsFailedRemovals: the EgressIP gone, the removal of its rules and
// table fails: the result says so by facility (no object fails: none wants them), the failure
// is counted, and the next Apply, once the kernel lets it, removes them.
func TestPrivilegedApplierReportsFailedRemovals(t *testing.T) {
	privileged.Require(t)
	l, a, reg, state := appliedLab(t)
	refused := errors.New("delete rule 6101: operation not permitted")
	restore := a.FailRemovals("routing", refused)
	state.Routing = dataplane.RoutingState{}
	res := l.apply(t, a, state)
	if len(res.Failed) > 0 || !errors.Is(res.Removals["routing"], refused) || len(res.Removals) != 1 {
		t.Errorf("Apply with the routing's removals refused: failed %v, removals %v; want no object failed and the routing's removal", res.Failed, res.Removals)
	}
	if n := labelled(t, reg, "egressd_dataplane_prune_failures_total", "facility", "routing"); n != 1 {
		t.Errorf("egressd_dataplane_prune_failures_total{facility=routing} %v, want 1", n)
	}
	if len(l.ownedRules(t)) == 0 {
		t.Fatal("the rules are gone though their removal failed")
	}
	restore()
	if res := l.apply(t, a, state); len(res.Failed) > 0 || len(res.Removals) > 0 {
		t.Errorf("the Apply after: failed %v, removals %v; want none", res.Failed, res.Removals)
	}
	if got := l.ownedRules(t); len(got) != 0 {
		t.Errorf("rules %q left after the retried removal", got)
	}
	if n := labelled(t, reg, "egressd_dataplane_prune_failures_total", "facility", "routing"); n != 1 {
		t.Errorf("egressd_dataplane_prune_failures_total{facility=routing} %v after a removal that succeeded, want 1 still", n)
	}
}

// labelled reads the counter of the applier's metrics that has the label name=value.
func labelled(t *testing.T, reg *prometheus.Registry, metric, name, value string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != metric {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == name && lp.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
