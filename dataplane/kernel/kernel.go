// Package kernel is the Applier that programs the node's kernel, composed of one part per
// kernel facility (classifier maps and attachment, the nftables table; routing, addresses and
// BFD as features land).
package kernel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/classifier"
	"github.com/egressd/egressd/dataplane/nft"
	"github.com/egressd/egressd/dataplane/tcx"
)

// Dataplane programs the kernel of the network namespace the process runs in.
type Dataplane struct {
	classifier *classifier.Classifier
	attacher   *tcx.Attacher
	nft        *nft.Table
	changed    chan struct{}
	done       chan struct{}
	log        *slog.Logger
}

// New adopts what a previous agent left under pinRoot (so that enforcement continues without a
// gap) and starts watching link changes.
func New(pinRoot string, o classifier.Options, log *slog.Logger) (*Dataplane, error) {
	c, err := classifier.Load(pinRoot, o)
	if err != nil {
		return nil, err
	}
	a, err := tcx.New(pinRoot, c.Program)
	if err != nil {
		c.Close()
		return nil, err
	}
	t, err := nft.New()
	if err != nil {
		a.Close()
		c.Close()
		return nil, err
	}
	d := &Dataplane{classifier: c, attacher: a, nft: t, changed: make(chan struct{}, 1), done: make(chan struct{}), log: log}
	go func() {
		if err := c.ServeACLLog(log); err != nil {
			log.Error("ACL logging stopped", "err", err)
		}
	}()
	links := make(chan netlink.LinkUpdate, 64)
	if err := netlink.LinkSubscribe(links, d.done); err != nil {
		d.Close()
		return nil, fmt.Errorf("subscribe to link changes: %w", err)
	}
	addrs := make(chan netlink.AddrUpdate, 64)
	if err := netlink.AddrSubscribe(addrs, d.done); err != nil {
		d.Close()
		return nil, fmt.Errorf("subscribe to address changes: %w", err)
	}
	go func() {
		for {
			select {
			case _, ok := <-links:
				if !ok {
					return
				}
			case _, ok := <-addrs:
				if !ok {
					return
				}
			}
			select {
			case d.changed <- struct{}{}:
			default:
			}
		}
	}()
	log.Info("dataplane ready", "adoptedLinks", a.Attached())
	return d, nil
}

// Collectors are the dataplane's Prometheus metrics.
func (d *Dataplane) Collectors() []prometheus.Collector {
	afterDNAT := func() map[classifier.RuleRef]classifier.Counters {
		out := map[classifier.RuleRef]classifier.Counters{}
		for o, c := range d.nft.Counters() {
			out[classifier.RuleRef{Namespace: o.Namespace, Rule: o.Rule}] = classifier.Counters{Packets: c.Packets, Bytes: c.Bytes}
		}
		return out
	}
	return []prometheus.Collector{classifier.NewCollector(d.classifier, afterDNAT)}
}

// Changed receives a value after the kernel changed under egressd (links or addresses added,
// removed, renamed): the desired state must be applied again.
func (d *Dataplane) Changed() <-chan struct{} { return d.changed }

// Apply makes the kernel match s.
func (d *Dataplane) Apply(_ context.Context, s *dataplane.State) dataplane.Result {
	// Maps first: a newly attached interface must find its pod's entries already there.
	res := dataplane.Result{Failed: d.classifier.Apply(s)}
	for o, err := range d.nft.Apply(s) {
		res.Failed[o] = errors.Join(res.Failed[o], err)
	}
	want := map[string]int{}
	owners := map[string][]dataplane.Origin{}
	for _, p := range s.LocalPods {
		for _, ip := range p.IPs {
			name, idx, err := podFacing(ip)
			if err != nil {
				res.Failed[p.Origin] = err
				continue
			}
			want[name] = idx
			owners[name] = append(owners[name], p.Origin)
		}
	}
	for ifname, err := range d.attacher.Sync(want) {
		for _, o := range owners[ifname] {
			res.Failed[o] = err
		}
		if len(owners[ifname]) == 0 { // a detach failed: no pod to blame, log it
			d.log.Error("detach classifier", "interface", ifname, "err", err)
		}
	}
	hosts, err := hostCIDRs(s.ClusterNetworks)
	if err != nil {
		d.log.Error("read host addresses", "err", err)
	}
	res.HostCIDRs = hosts
	return res
}

// hostCIDRs are the global unicast addresses of the node, except those in the cluster networks
// (pod gateways on a CNI bridge are not host addresses; upstream likewise leaves out its
// management port).
func hostCIDRs(cluster []netip.Prefix) ([]netip.Prefix, error) {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if !ip.IsGlobalUnicast() || slices.ContainsFunc(cluster, func(p netip.Prefix) bool { return p.Contains(ip) }) {
			continue
		}
		ones, _ := a.Mask.Size()
		out = append(out, netip.PrefixFrom(ip, ones))
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return out, nil
}

// podFacing finds the host interface that faces a local pod: the interface of the directly
// connected route to its address (a per-pod veth, or the bridge of a bridged CNI).
func podFacing(ip netip.Addr) (string, int, error) {
	routes, err := netlink.RouteGet(ip.AsSlice())
	if err != nil || len(routes) == 0 {
		return "", 0, fmt.Errorf("no route to pod address %s: %v", ip, err)
	}
	r := routes[0]
	if r.Gw != nil {
		return "", 0, fmt.Errorf("pod address %s is routed via %s, not on a local interface", ip, r.Gw)
	}
	l, err := netlink.LinkByIndex(r.LinkIndex)
	if err != nil {
		return "", 0, fmt.Errorf("interface %d facing pod %s: %w", r.LinkIndex, ip, err)
	}
	if l.Type() == "device" && l.Attrs().Name == "lo" {
		return "", 0, fmt.Errorf("pod address %s is local to the node", ip)
	}
	return l.Attrs().Name, l.Attrs().Index, nil
}

// Close stops watching and releases file descriptors; what is programmed stays.
func (d *Dataplane) Close() {
	close(d.done)
	d.attacher.Close()
	d.classifier.Close()
}
