package reference

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressd/egressd/internal/promdesc"
)

// constCollector describes the descriptors it was given.
type constCollector []*prometheus.Desc

func (c constCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c {
		ch <- d
	}
}

func (constCollector) Collect(chan<- prometheus.Metric) {}

func TestMetrics(t *testing.T) {
	got, err := Metrics([]prometheus.Collector{
		prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "b_gauge", Help: "A gauge | with a pipe."}, []string{"x", "y"}),
		prometheus.NewCounter(prometheus.CounterOpts{Name: "a_total", Help: "A counter."}),
		prometheus.NewHistogram(prometheus.HistogramOpts{Name: "c_seconds", Help: "A histogram."}),
		constCollector{promdesc.New("d_total", "A const counter.", prometheus.CounterValue, "reason").Desc},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "| metric | type | labels | description |\n|---|---|---|---|\n" +
		"| `a_total` | counter | — | A counter. |\n" +
		"| `b_gauge` | gauge | `x`, `y` | A gauge \\| with a pipe. |\n" +
		"| `c_seconds` | histogram | — | A histogram. |\n" +
		"| `d_total` | counter | `reason` | A const counter. |\n"
	if got != want {
		t.Errorf("Metrics:\n%s\nwant:\n%s", got, want)
	}

	// A const metric whose type is unknown, or a name described twice, is an error.
	untyped := constCollector{prometheus.NewDesc("e_total", "Untyped.", nil, nil)}
	if _, err := Metrics([]prometheus.Collector{untyped}); err == nil || !strings.Contains(err.Error(), "declare it with promdesc.New") {
		t.Errorf("untyped const metric: %v", err)
	}
	twice := constCollector{promdesc.New("f_total", "Twice.", prometheus.CounterValue).Desc}
	if _, err := Metrics([]prometheus.Collector{twice, twice}); err == nil || !strings.Contains(err.Error(), "f_total is described twice") {
		t.Errorf("a metric described twice: %v", err)
	}
}
