package dnsnames

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Collectors are the metrics of what the resolver learned from DNS answers to pods, to register.
func (r *Resolver) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "egressd_dns_learned_addresses",
			Help: "Addresses learned from DNS answers to pods and kept now (until their TTL plus 5 s), over every wanted name.",
		}, func() float64 { return float64(r.Stats().Learned) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "egressd_dns_learned_refused_total",
			Help: fmt.Sprintf("Addresses DNS answers gave a wanted name that were not kept: beyond %d per name, %d under one wildcard, the cap of the answers to one namespace's pods (--dns-learned-per-namespace), or %d names. A rise: a rule's name answers with more addresses than egressd keeps, and some connections to them are judged without them.", MaxAddresses, MaxWildcardAddresses, MaxLearnedNames),
		}, func() float64 { return float64(r.Stats().Refused) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "egressd_dns_learned_capped_namespaces",
			Help: "Namespaces whose pods' DNS answers are no longer learned: they keep as many learned addresses as --dns-learned-per-namespace allows, until some expire. This node's NodeReport notes it (shown in the EgressFirewall's status), and a Warning Event.",
		}, func() float64 { return float64(r.Stats().Capped) }),
	}
}
