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
			// From a sync that was idle to several syncs under a burst of new pods.
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
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
