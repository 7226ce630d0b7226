package bfd

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// SessionsFromMetrics reads back what the Manager's collector exports: every session with its state, detection time and counters.
// In a synctest bubble, as bringUp wants.
func TestSessionsFromMetricsReadsTheCollector(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, _ := startTestManager(t)
		a, b := Config{Peer: peerA, Local: local, Interface: "eth1"}, Config{Peer: peerB, Local: local}
		if errs := m.Sync([]Config{a, b}); len(errs) != 0 {
			t.Fatal(errs)
		}
		bringUp(t, m, a, 3)
		reg := prometheus.NewRegistry()
		reg.MustRegister(m.Collectors()...)
		gathered, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		families := map[string]*dto.MetricFamily{}
		for _, f := range gathered {
			families[f.GetName()] = f
		}
		got, err := SessionsFromMetrics(families)
		if err != nil {
			t.Fatal(err)
		}
		want := sessionsByKey(m)
		if len(got) != 2 || got[0].Key != a.Key() || got[1].Key != b.Key() {
			t.Fatalf("scraped sessions %+v, want %s and %s", got, a.Key(), b.Key())
		}
		for _, s := range got {
			w := want[s.Key]
			if s.State != w.State || s.DetectionTime != w.DetectionTime || s.LastChange.Sub(w.LastChange).Abs() > time.Microsecond /* float seconds */ ||
				s.Counters.Transitions != w.Counters.Transitions || s.Counters.PacketsReceived != w.Counters.PacketsReceived {
				t.Errorf("%s scraped as %+v, the Manager has %+v", s.Key, s, w)
			}
		}
		if got[0].State != Up || got[1].State != Down || got[0].Counters.PacketsReceived != 2 {
			t.Errorf("states %s, %s, packets received from %s %d: want Up, Down, 2", got[0].State, got[1].State, a.Peer, got[0].Counters.PacketsReceived)
		}
	})
}
