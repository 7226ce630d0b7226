package kernel

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressd/egressd/dataplane/rpfilter"
)

// reversePath loosens the reverse path filter of the interfaces egressd's routes bring replies
// in through, where it is strict (routing.Router.ReplyInterfaces), and puts back those no
// longer used; without a loosener it logs, once per interface, and exports the strict ones.
func (d *Applier) reversePath() {
	consider := rpfilter.Strict
	if d.loosener != nil {
		consider = func(name string) bool { return rpfilter.Strict(name) || slices.Contains(d.loosener.Loosened(), name) }
	}
	through, complete := d.routing.ReplyInterfaces(consider)
	if d.loosener != nil {
		loosened, restored, err := d.loosener.Sync(through, complete)
		for _, name := range loosened {
			d.log.Warn("loosened the reverse path filter of an interface egressd routes traffic through (not main's default route's): its replies arrive there, and a strict filter drops them when main routes their source elsewhere; put back once egressd no longer routes through it, or by egressctl cleanup",
				"interface", name, "sysctl", "net.ipv4.conf."+name+".rp_filter=2")
		}
		for _, name := range restored {
			d.log.Info("put back the reverse path filter egressd had loosened", "interface", name)
		}
		if err != nil {
			d.log.Error("loosen the reverse path filter", "err", err)
		}
	}
	var strict []string
	for _, name := range through {
		if rpfilter.Strict(name) {
			strict = append(strict, name)
		}
	}
	slices.Sort(strict)
	d.strictRPFilter.Reset()
	for _, name := range strict {
		d.strictRPFilter.WithLabelValues(name).Set(1)
		if !slices.Contains(d.strictWarned, name) {
			d.log.Warn("egressd routes traffic through an interface other than the default route's whose reverse path filter is strict: replies arriving there are dropped when main routes their source elsewhere; set it loose",
				"interface", name, "sysctl", "net.ipv4.conf."+name+".rp_filter=2")
		}
	}
	d.strictWarned = strict
}

func newStrictRPFilter() *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "egressd_strict_rp_filter_interface",
		Help: "1 for each interface, other than the IPv4 default route's, that egressd's routes send traffic through (an external gateway's, an egress IP's on a secondary network) while its reverse path filter is strict (rp_filter 1): replies arriving there are dropped when main routes their source elsewhere. The agent loosens it (rp_filter 2) unless --loosen-rp-filter=false, so this says it did not, or could not (its log says why).",
	}, []string{"interface"})
}
