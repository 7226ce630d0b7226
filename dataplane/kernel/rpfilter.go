package kernel

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/rpfilter"
)

// reversePath loosens the reverse path filter of the interfaces where egressd's traffic arrives
// with sources main routes elsewhere, where it is strict: those egressd's routes bring replies
// in through (routing.Router.ReplyInterfaces), and, on an egress node whose CNI routes the other
// nodes' pods through an overlay, the one other nodes steer to directly (SteeredArrivals). It puts back those no longer used; without a loosener it logs, once per
// interface, and exports the strict ones.
func (f *routingFacility) reversePath(steeredFrom []netip.Addr, steeredPods []netip.Prefix) {
	consider := rpfilter.Strict
	if f.loosener != nil {
		consider = func(name string) bool { return rpfilter.Strict(name) || slices.Contains(f.loosener.Loosened(), name) }
	}
	through, complete := f.router.ReplyInterfaces(consider)
	arrivals, arrivalsComplete := f.router.SteeredArrivals(steeredFrom, steeredPods, consider)
	maps.Copy(through, arrivals)
	complete = complete && arrivalsComplete
	if f.loosener != nil {
		loosened, restored, err := f.loosener.Sync(through, complete)
		for _, name := range loosened {
			f.log.Warn("loosened the reverse path filter of an interface where egressd's traffic arrives with sources main routes elsewhere (replies of what egressd routes through it, or packets of other nodes' pods steered to this egress node while the CNI routes those pods through an overlay); a strict filter drops them; put back once no longer needed, or by egressctl cleanup",
				"interface", name, "sysctl", "net.ipv4.conf."+name+".rp_filter=2")
		}
		for _, name := range restored {
			f.log.Info("put back the reverse path filter egressd had loosened", "interface", name)
		}
		if err != nil {
			f.log.Error("loosen the reverse path filter", "err", err)
		}
	}
	var strict []string
	for _, name := range through {
		if rpfilter.Strict(name) {
			strict = append(strict, name)
		}
	}
	slices.Sort(strict)
	f.strictRPFilter.Reset()
	for _, name := range strict {
		f.strictRPFilter.WithLabelValues(name).Set(1)
		if !slices.Contains(f.strictWarned, name) {
			f.log.Warn("egressd's traffic arrives through an interface whose reverse path filter is strict while main routes its sources elsewhere (replies of what egressd routes through it, or other nodes' steered packets while the CNI routes their pods through an overlay): they are dropped; set it loose",
				"interface", name, "sysctl", "net.ipv4.conf."+name+".rp_filter=2")
		}
	}
	f.strictWarned = strict
}

func newStrictRPFilter() *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "egressd_strict_rp_filter_interface",
		Help: "1 for each interface where egressd's traffic arrives with sources main routes elsewhere while its reverse path filter is strict (rp_filter 1), so that it is dropped: one, other than the IPv4 default route's, that egressd's routes send traffic through (an external gateway's, an egress IP's on a secondary network), whose replies come back there; or, on an egress node whose CNI routes the other nodes' pods through an overlay (flannel, Calico IPIP/VXLAN), the default route's, where other nodes' steered packets arrive. The agent loosens it (rp_filter 2) unless --loosen-rp-filter=false, so this says it did not, or could not (its log says why).",
	}, []string{"interface"})
}

// checks6Every is how often reversePath6 reads the ruleset again while the paths it looks at
// stay the same (a firewall reloaded meanwhile shows at the first routing install after).
var checks6Every = 30 * time.Second

// reversePath6 reports the IPv6 reverse path checks of the node's firewall that drop traffic
// egressd routes (rpfilter.Checks6, Dropping): it never changes another's table. The ruleset
// is read only while egressd routes IPv6 through another interface than main's IPv6 default
// route's (routing.Router.ReplyInterfaces6), or through its tunnel to a peer with IPv6
// nexthops (tunnel6), and then once per checks6Every or when those interfaces change.
func (f *routingFacility) reversePath6(tunnel6 bool) {
	through, marked, complete := f.router.ReplyInterfaces6()
	var names []string
	unmarked := tunnel6
	for index, name := range through {
		names = append(names, name)
		unmarked = unmarked || !marked[index]
	}
	if tunnel6 {
		names = append(names, dataplane.TunnelDevice)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	paths := strings.Join(names, ",")
	if !complete && len(names) == 0 {
		return // the kernel could not say: the last report stands
	}
	if len(names) == 0 {
		f.checks6, f.checks6Paths = nil, ""
	} else if paths != f.checks6Paths || time.Since(f.checks6Read) >= checks6Every {
		checks, err := readChecks6()
		if err != nil {
			f.log.Error("read the node's nftables ruleset for IPv6 reverse path checks", "err", err)
		}
		f.checks6 = rpfilter.Dropping(checks, true, unmarked)
		f.checks6Paths, f.checks6Read = paths, time.Now()
	}
	f.ipv6RPCheck.Reset()
	warned := map[string]bool{}
	for _, c := range f.checks6 {
		f.ipv6RPCheck.WithLabelValues(c.Table, c.Chain, c.Kind()).Set(1)
		id := fmt.Sprintf("%s/%s/%d/%s", c.Table, c.Chain, c.Handle, c.Kind())
		warned[id] = true
		if !f.checks6Warned[id] {
			why := "it looks the source up without the packet's mark, or before egressd's replies carry it"
			if c.Met() {
				why = "it looks the source up with the packet's mark, which egressd sets for the replies of egress IPs on secondary networks only, not for an IPv6 gateway's replies on another interface nor for packets through egressd's tunnel"
			}
			f.log.Warn("the node's firewall has an IPv6 reverse path check that drops the replies of traffic egressd routes through another interface than the IPv6 default route's (or its tunnel): "+why,
				"table", c.Table, "chain", c.Chain, "handle", c.Handle, "rule", c.Rule(), "kind", c.Kind(), "interfaces", names, "fix", c.Fix())
		}
	}
	f.checks6Warned = warned
}

// readChecks6 reads the IPv6 reverse path checks of the agent's network namespace.
func readChecks6() ([]rpfilter.Check6, error) {
	conn, err := nftables.New(nftables.AsLasting())
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.CloseLasting() }()
	return rpfilter.Checks6(conn)
}

// tunnel6 says whether the tunnel carries IPv6: a peer is reached through it for IPv6.
func tunnel6(s *dataplane.TunnelState) bool {
	return s.Local.IsValid() && slices.ContainsFunc(s.Peers, func(p dataplane.TunnelPeer) bool {
		return slices.ContainsFunc(p.Nexthops, func(a netip.Addr) bool { return a.Unmap().Is6() })
	})
}

func newIPv6RPCheck() *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "egressd_ipv6_reverse_path_check",
		Help: "1 for each IPv6 reverse path check of the node's firewall (nftables `fib saddr . iif oif missing drop`, ip6tables `-m rpfilter --invert`: firewalld's IPv6_rpfilter) that drops the replies of IPv6 traffic egressd routes through another interface than main's IPv6 default route's (an egress IP on a secondary network, an external gateway) or through its tunnel. kind: fib_no_mark, rpfilter_no_mark (keyed without the packet's mark: firewalld before 1.0), fib_before_mark, rpfilter_before_mark (keyed by the mark, but run before egressd marks the replies: raw), fib_mark, rpfilter_mark (firewalld 1.0 and later: only a gateway's or the tunnel's traffic is dropped). chain is the chain holding the rule. The agent never changes the firewall: set IPv6_rpfilter=loose or no in firewalld.conf.",
	}, []string{"table", "chain", "kind"})
}
