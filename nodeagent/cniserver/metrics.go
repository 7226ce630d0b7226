package cniserver

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of the plugin's ADD calls this agent answers.
type Metrics struct {
	add     *prometheus.HistogramVec
	objects *prometheus.CounterVec
}

// NewMetrics creates the metrics; register Collectors.
func NewMetrics() *Metrics {
	return &Metrics{
		add: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "egressd_cni_add_duration_seconds",
			Help: "Time egressd took to answer a CNI ADD of egressd-cni, from the request to the pod programmed (the plugin's own start-up is not included), by result: programmed, failed (not programmed in time: the pod's sandbox fails and is retried).",
			// Fine from 1 to 10 ms, where a quiet node answers, with a bound at 5 ms (the
			// target of an ADD one at a time: the share within it reads off one bucket), up
			// to the plugin's default timeout of 10 s.
			Buckets: []float64{.0005, .001, .0015, .002, .003, .004, .005, .006, .008, .01, .015, .02, .03, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"result"}),
		objects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressd_cni_pod_objects_total",
			Help: "Where the Pod object of a CNI ADD came from: informer (the agent's cache held it), api (a GET, the cache lagging), none (unreadable: the pod is programmed by its namespace until its object arrives).",
		}, []string{"source"}),
	}
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.add, m.objects}
}

func (m *Metrics) added(result string, took time.Duration) {
	if m != nil {
		m.add.WithLabelValues(result).Observe(took.Seconds())
	}
}

func (m *Metrics) object(source string) {
	if m != nil {
		m.objects.WithLabelValues(source).Inc()
	}
}
