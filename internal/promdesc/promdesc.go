// Package promdesc declares the descriptors of metrics that collectors build at scrape time
// (const metrics) together with their type, which prometheus.Desc does not carry: the metrics
// reference (docs/reference/metrics.md) is generated from descriptors, before any sample
// exists, and a metric's samples cannot disagree with its documented type.
package promdesc

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// types holds the type of every descriptor New made (descriptors are package variables,
// made once).
var types sync.Map // *prometheus.Desc -> prometheus.ValueType

// Desc is a metric descriptor with its type.
type Desc struct {
	*prometheus.Desc
	valueType prometheus.ValueType
}

// New declares the metric name of type t with the variable labels.
func New(name, help string, t prometheus.ValueType, labels ...string) Desc {
	d := Desc{prometheus.NewDesc(name, help, labels, nil), t}
	types.Store(d.Desc, t)
	return d
}

// Sample is a sample of d, its label values in the order of d's labels.
func (d Desc) Sample(v float64, labelValues ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d.Desc, d.valueType, v, labelValues...)
}

// TypeOf is the type d was declared with, false when New did not make it.
func TypeOf(d *prometheus.Desc) (prometheus.ValueType, bool) {
	t, ok := types.Load(d)
	if !ok {
		return 0, false
	}
	return t.(prometheus.ValueType), true
}
