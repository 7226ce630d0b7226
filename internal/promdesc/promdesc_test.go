package promdesc

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestDescKeepsItsType: a descriptor New made tells its type (for the metrics reference) and
// its samples are of that type; a descriptor made elsewhere has none.
func TestDescKeepsItsType(t *testing.T) {
	d := New("egressd_test_drops_total", "Drops.", prometheus.CounterValue, "reason")
	if typ, ok := TypeOf(d.Desc); !ok || typ != prometheus.CounterValue {
		t.Errorf("TypeOf: %v, %v; want counter", typ, ok)
	}
	var m dto.Metric
	if err := d.Sample(3, "unknown_pod").Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.GetCounter().GetValue() != 3 || m.GetLabel()[0].GetValue() != "unknown_pod" {
		t.Errorf("sample: %v", &m)
	}
	if _, ok := TypeOf(prometheus.NewDesc("egressd_test_other", "Other.", nil, nil)); ok {
		t.Error("a descriptor New did not make has a type")
	}
}
