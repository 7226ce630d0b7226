package nodeagent

import (
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/internal/version"
	"github.com/egressd/egressd/nodeagent/cluster"
)

// Metrics are the agent's Prometheus metrics, on their own registry (no global state).
type Metrics struct {
	Registry     *prometheus.Registry
	SyncDuration *prometheus.HistogramVec
	SyncErrors   *prometheus.CounterVec
	// Latency is from an object change arriving to the kernel being programmed for it.
	Latency prometheus.Histogram
	// SteeredPaths names the object of each steering mark (egressctl routes reads it: the
	// kernel's rules and tables know only the mark).
	SteeredPaths *prometheus.GaugeVec
	// Objects and ObjectFailures are what the last sync made of each API object on this node
	// (egressctl status, alerts on objects not applied).
	Objects        *prometheus.GaugeVec
	ObjectFailures *prometheus.GaugeVec
	buildInfo      *prometheus.GaugeVec
	// OutsideNetworks counts local pod addresses outside the cluster networks: pod-to-pod traffic
	// to them would be judged as leaving the cluster (a CNI whose IPAM is not the Nodes'
	// podCIDRs needs --cluster-cidr).
	OutsideNetworks prometheus.Gauge
	// ServedPodScopes counts the scopes of other nodes' pods the agent reads (servePods).
	ServedPodScopes prometheus.Gauge
}

// NewMetrics registers the agent's metrics and the Go and process collectors.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		SyncDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "egressd_sync_duration_seconds",
			Help:    "Duration of one sync step (compile of a feature, merge of the features' parts into the node's state, or apply), by feature.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"feature"}),
		SyncErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressd_sync_errors_total",
			Help: "Sync steps that failed, by feature.",
		}, []string{"feature"}),
		Latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "egressd_programming_latency_seconds",
			Help:    "Time from an API object change reaching this agent to the node's kernel being programmed for it.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		SteeredPaths: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "egressd_steered_path_pod_addresses",
			Help: "Pod addresses steered through the path of an object (EgressIP, AdminPolicyBasedExternalRoute, EgressService), by the skb->mark that selects its ip rules and table: local pods, and for an egress IP of this node on a secondary host network every pod SNATed to it (its table copies the routes of the IP's interface); kind ExternalGateway is a gateway's return path, whose mark only the replies of connections it brought carry, and kind RemotePodReplies the path back to their nodes of the replies to other nodes' pods SNATed here (both 0 pod addresses).",
		}, []string{"kind", "object", "mark"}),
		OutsideNetworks: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "egressd_pod_addresses_outside_cluster_networks",
			Help: "Local pod addresses outside the cluster networks (discovered from the Nodes' spec.podCIDRs unless --cluster-cidr is set); nonzero means the networks are wrong.",
		}),
		ServedPodScopes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "egressd_served_pod_scopes",
			Help: "Scopes (a namespace or all, and a label selector) of other nodes' pods the agent reads besides its node's own, one list and watch each: on a node that may host egress IPs, the pods of the assigned EgressIPs; on every node, the gateway pods of the external-route policies' dynamic hops (every pod with --external-gateway-annotations). 0 on a node that serves none.",
		}),
		Objects: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "egressd_objects",
			Help: "API objects the last sync programmed on this node, by kind and result (applied, failed).",
		}, []string{"kind", "result"}),
		ObjectFailures: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "egressd_object_failure",
			Help: "1 per API object the last sync failed to program on this node, by reason: invalid (it did not compile: the node keeps enforcing its previous rules), dataplane (the kernel refused part of it). The error itself is in the object's status, its Events and the agent's log.",
		}, []string{"kind", "object", "reason"}),
		buildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "egressd_build_info",
			Help: "1, labelled with the version of this agent.",
		}, []string{"version"}),
	}
	m.buildInfo.WithLabelValues(version.String()).Set(1)
	m.Registry.MustRegister(m.Collectors()...)
	m.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Collectors are the agent's own metrics (NewMetrics registers them, with the Go and process
// collectors); the metrics reference is generated from them.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.SyncDuration, m.SyncErrors, m.Latency, m.SteeredPaths,
		m.OutsideNetworks, m.ServedPodScopes, m.Objects, m.ObjectFailures, m.buildInfo}
}

// observeObjects sets Objects and ObjectFailures from a sync's outcome: the objects compiled
// (with their compile or apply error; invalid: those that did not compile) and the dataplane's
// failures of objects that have no status of their own on this node (EgressIP, EgressService,
// pods). A failure's label is its kind of reason, never the error's text: a label set that
// grows with every new text is a series each, and the text is the status's.
func (m *Metrics) observeObjects(objects cluster.Outcomes, failed map[dataplane.Origin]error, invalid map[dataplane.Origin]bool) {
	m.Objects.Reset()
	m.ObjectFailures.Reset()
	// Counted by kind, and set once per kind and result: the 10,000 firewalls in force are
	// counted by their shared statuses, not walked at every sync.
	inForce, failures := objects.Tally()
	for o, err := range failed {
		switch _, reported := objects.Get(o); {
		case reported:
		case err == nil:
			inForce[o.Kind]++
		default:
			failures[o.Kind]++
			m.observeFailure(o, invalid)
		}
	}
	for o := range objects.Failures() {
		m.observeFailure(o, invalid)
	}
	for result, counts := range map[string]map[dataplane.Kind]int{"applied": inForce, "failed": failures} {
		for kind, n := range counts {
			if n > 0 {
				m.Objects.WithLabelValues(string(kind), result).Set(float64(n))
			}
		}
	}
}

// observeFailure marks o failed, for the dataplane or, if invalid, for its spec.
func (m *Metrics) observeFailure(o dataplane.Origin, invalid map[dataplane.Origin]bool) {
	reason := "dataplane"
	if invalid[o] {
		reason = "invalid"
	}
	m.ObjectFailures.WithLabelValues(string(o.Kind), objectName(o), reason).Set(1)
}

// objectName is namespace/name, or name for a cluster-scoped object.
func objectName(o dataplane.Origin) string {
	if o.Namespace != "" {
		return o.Namespace + "/" + o.Name
	}
	return o.Name
}

// observePaths sets SteeredPaths from the state about to be applied: per table of a steering
// path, its mark and the pod addresses that carry it.
func (m *Metrics) observePaths(s *dataplane.State) {
	m.SteeredPaths.Reset()
	for _, t := range s.Routing.Tables {
		i := slices.IndexFunc(s.Routing.Rules, func(r dataplane.RouteRule) bool { return r.Network == "" && r.Table == t.ID })
		if i < 0 {
			continue
		}
		mark := s.Routing.Rules[i].Mark
		pods := 0
		for _, p := range s.Nftables.Steered {
			if p.Mark == mark {
				pods++
			}
		}
		m.SteeredPaths.WithLabelValues(string(t.Origin.Kind), objectName(t.Origin), fmt.Sprintf("%#x", mark)).Set(float64(pods))
	}
}
