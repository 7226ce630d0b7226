package kernel

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/egressd/egressd/dataplane"
)

// fake is a facility that records its calls in a shared journal and fails as told.
type fake struct {
	id       string
	journal  *[]string
	failed   map[dataplane.Origin]error
	pruneErr error
	// saw is what the pass held when it installed.
	saw func(p *pass)
}

func (f *fake) name() string { return f.id }

func (f *fake) install(p *pass) map[dataplane.Origin]error {
	*f.journal = append(*f.journal, "install "+f.id)
	if f.saw != nil {
		f.saw(p)
	}
	return f.failed
}

// fakePruner is a fake that also prunes.
type fakePruner struct{ *fake }

func (f fakePruner) prune(*pass) error {
	*f.journal = append(*f.journal, "prune "+f.id)
	return f.pruneErr
}

func (f fakePruner) removes() string { return f.id + "'s leftovers" }

func testApplier(log *bytes.Buffer, facilities ...facility) *Applier {
	return &Applier{facilities: facilities, applied: map[string]any{}, metrics: newMetrics(), log: slog.New(slog.NewTextHandler(log, nil))}
}

// TestRunInstallsInOrderThenPrunesInReverse: every facility installs in the list's order, and
// only then do the pruners remove, last installed first (a rule goes before the route it
// selects, a route before the address it leaves from). What one facility leaves in the pass
// (the routes, where pods face) reaches those after it.
func TestRunInstallsInOrderThenPrunesInReverse(t *testing.T) {
	var journal []string
	routes := &dataplane.RoutingState{}
	var sawRoutes *dataplane.RoutingState
	a := &fake{id: "addresses", journal: &journal}
	r := &fake{id: "routing", journal: &journal, saw: func(p *pass) { p.routes = routes }}
	c := &fake{id: "classifier", journal: &journal, saw: func(p *pass) { sawRoutes = p.routes }}
	tun := &fake{id: "tunnel", journal: &journal}
	d := testApplier(&bytes.Buffer{}, fakePruner{a}, fakePruner{tun}, fakePruner{r}, c)
	failed, removals := d.run(&pass{state: &dataplane.State{}})
	if len(failed) != 0 || removals != nil {
		t.Fatalf("failed %v, removals %v", failed, removals)
	}
	want := "install addresses, install tunnel, install routing, install classifier, prune routing, prune tunnel, prune addresses"
	if got := strings.Join(journal, ", "); got != want {
		t.Errorf("calls:\n got %s\nwant %s", got, want)
	}
	if sawRoutes != routes {
		t.Error("the classifier did not see the routes the routing facility left in the pass")
	}
}

// TestRunJoinsFailuresByObject: failures of one object from several facilities are all in the
// result, those of others stay apart, and a later facility sees the failures so far (attach
// tells podsInForce of them).
func TestRunJoinsFailuresByObject(t *testing.T) {
	var journal []string
	pod := dataplane.Origin{Kind: "Pod", Namespace: "a", Name: "p"}
	other := dataplane.Origin{Kind: "EgressIP", Name: "e"}
	errAddr, errRoute, errOther := errors.New("address refused"), errors.New("route refused"), errors.New("other")
	var seen map[dataplane.Origin]error
	d := testApplier(&bytes.Buffer{},
		&fake{id: "addresses", journal: &journal, failed: map[dataplane.Origin]error{pod: errAddr}},
		&fake{id: "routing", journal: &journal, failed: map[dataplane.Origin]error{pod: errRoute, other: errOther}},
		&fake{id: "attach", journal: &journal, saw: func(p *pass) {
			seen = map[dataplane.Origin]error{}
			for o, err := range p.failed {
				seen[o] = err
			}
		}})
	failed, _ := d.run(&pass{state: &dataplane.State{}})
	if err := failed[pod]; !errors.Is(err, errAddr) || !errors.Is(err, errRoute) {
		t.Errorf("the pod's failure is %v, want both facilities'", err)
	}
	if err := failed[other]; !errors.Is(err, errOther) || errors.Is(err, errAddr) {
		t.Errorf("the EgressIP's failure is %v, want its own only", err)
	}
	if len(seen) != 2 || !errors.Is(seen[pod], errRoute) {
		t.Errorf("attach saw the failures %v, want the two objects'", seen)
	}
}

// TestRunReportsFailedRemovals: a removal that fails is in the result by facility, counted and
// logged with its cause, and the removals after it still run.
func TestRunReportsFailedRemovals(t *testing.T) {
	var journal []string
	var log bytes.Buffer
	refused := errors.New("operation not permitted")
	d := testApplier(&log,
		fakePruner{&fake{id: "addresses", journal: &journal}},
		fakePruner{&fake{id: "routing", journal: &journal, pruneErr: refused}})
	for range 2 {
		_, removals := d.run(&pass{state: &dataplane.State{}})
		if len(removals) != 1 || !errors.Is(removals["routing"], refused) {
			t.Fatalf("removals %v, want routing's refusal", removals)
		}
	}
	if got := strings.Join(journal[len(journal)-2:], ", "); got != "prune routing, prune addresses" {
		t.Errorf("last calls %s: the addresses' removal did not run after routing's failed", got)
	}
	if n := testutil.ToFloat64(d.metrics.pruneFailures.WithLabelValues("routing")); n != 2 {
		t.Errorf("egressd_dataplane_prune_failures_total{facility=routing} = %v, want 2", n)
	}
	if !strings.Contains(log.String(), `msg="remove routing's leftovers" facility=routing err="operation not permitted"`) {
		t.Errorf("the log does not name the facility and the cause:\n%s", log.String())
	}
}

// TestRunTimesEachPhase: each facility's install is observed under its name, the removals
// under "removals", once per Apply.
func TestRunTimesEachPhase(t *testing.T) {
	var journal []string
	d := testApplier(&bytes.Buffer{}, &fake{id: "nftables", journal: &journal}, fakePruner{&fake{id: "tunnel", journal: &journal}})
	d.run(&pass{state: &dataplane.State{}})
	d.run(&pass{state: &dataplane.State{}})
	if n := testutil.CollectAndCount(d.metrics.phases); n != 3 {
		t.Errorf("%d phase series, want 3 (nftables, tunnel, removals)", n)
	}
	for _, phase := range []string{"nftables", "tunnel", "removals"} {
		h := d.metrics.phases.WithLabelValues(phase).(interface{ Write(*dto.Metric) error })
		var m dto.Metric
		if err := h.Write(&m); err != nil || m.GetHistogram().GetSampleCount() != 2 {
			t.Errorf("phase %s observed %d times, want 2 (%v)", phase, m.GetHistogram().GetSampleCount(), err)
		}
	}
}

// fakeSectioned is a fake pruner whose section is what it is told.
type fakeSectioned struct {
	fakePruner
	is *string
}

func (f fakeSectioned) section(*pass) any { return *f.is }

// TestRunSkipsWhatDidNotChange: a facility whose section is the one it last wrote without a
// failure skips the pass, unless the pass is full; once one runs, those after it run too; a
// failure, of its install or of its removals, makes it run again next time.
func TestRunSkipsWhatDidNotChange(t *testing.T) {
	var journal []string
	nftables, addresses, routing := "n1", "a1", "r1"
	addrFake := &fake{id: "addresses", journal: &journal}
	routeFake := &fake{id: "routing", journal: &journal}
	d := testApplier(&bytes.Buffer{},
		fakeSectioned{fakePruner{&fake{id: "nftables", journal: &journal}}, &nftables},
		fakeSectioned{fakePruner{addrFake}, &addresses},
		&fake{id: "classifier", journal: &journal},
		fakeSectioned{fakePruner{routeFake}, &routing})
	ran := func(step string, full bool, want string) {
		t.Helper()
		journal = nil
		d.run(&pass{state: &dataplane.State{}, full: full})
		var installed []string
		for _, call := range journal {
			if name, ok := strings.CutPrefix(call, "install "); ok {
				installed = append(installed, name)
			}
		}
		if got := strings.Join(installed, " "); got != want {
			t.Errorf("%s: installed %q, want %q", step, got, want)
		}
	}
	ran("first", false, "nftables addresses classifier routing")
	ran("nothing changed", false, "classifier")
	routing = "r2"
	ran("routing changed", false, "classifier routing")
	addresses = "a2"
	ran("addresses changed: routing after it too", false, "addresses classifier routing")
	ran("full pass", true, "nftables addresses classifier routing")
	addrFake.failed = map[dataplane.Origin]error{{Kind: "EgressIP", Name: "e"}: errors.New("refused")}
	addresses = "a3"
	ran("addresses changed, and fail", false, "addresses classifier routing")
	addrFake.failed = nil
	ran("nothing changed, but addresses failed", false, "addresses classifier routing")
	ran("all written", false, "classifier")
	routeFake.pruneErr = errors.New("busy")
	routing = "r3"
	ran("routing's removals fail", false, "classifier routing")
	routeFake.pruneErr = nil
	ran("after the failed removals", false, "classifier routing")
	ran("removed", false, "classifier")
	if n := testutil.ToFloat64(d.metrics.skipped.WithLabelValues("nftables")); n != 9 {
		t.Errorf("nftables skipped %v times, want 9", n)
	}
}
