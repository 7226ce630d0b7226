// Package egressrouter runs OpenShift's redirect-mode EgressRouter without Multus or the
// cluster-network-operator: per EgressRouter one router pod labelled app: egress-router-cni (so
// the Services users wrote for upstream select it), placed by the leader (Controller) on a Ready,
// reachable node on the router's network (any, when no node has an address there; decide), and
// configured, when that node's CNI chain adds the pod, from what this node's agent compiles
// (Node, compile) into a dataplane/router.Config.
//
// # Who touches the pod's network namespace, and why
//
// Configuring a router means entering the pod's network namespace (setns), which needs
// CAP_SYS_ADMIN; the agent runs with NET_ADMIN, NET_RAW, BPF and PERFMON only, and adding
// SYS_ADMIN (in effect root on the node) to every agent for one feature would undo that least
// privilege. egressd's chained CNI plugin, which the container runtime runs as root inside the
// pod's sandbox setup anyway, does it instead, as upstream's egress-router-cni does: on the
// router pod's ADD the agent answers with the router's configuration, the plugin applies it
// (dataplane/router) before the pod starts, and reports the outcome, which the agent writes
// into the EgressRouter's status. A spec change therefore cannot be applied inside a running
// pod: the leader replaces the pod (its spec hash annotation no longer matches), which
// interrupts the router for as long as a new pod takes to start. Passing the agent netlink
// sockets opened in the pod's namespace (SCM_RIGHTS) would allow in-place changes without
// SYS_ADMIN, but needs netlink transports over foreign sockets that neither
// vishvananda/netlink nor google/nftables offer.
package egressrouter

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	netopv1 "github.com/egressd/egressd/api/networkoperator/v1"
	"github.com/egressd/egressd/dataplane/router"
)

// compile turns an EgressRouter's spec into the router's configuration; clusterNetworks stay
// routed via the pod's primary interface. Errors name the field and say what is wrong.
//
// Beyond upstream, which uses spec.addresses[0] only: every address is put on the macvlan, the
// first of each family is the SNAT source of that family, and each family's first gateway is
// its default route, so one router serves IPv4 and IPv6.
func compile(er *netopv1.EgressRouter, clusterNetworks []netip.Prefix) (*router.Config, error) {
	s := &er.Spec
	if s.Mode != "" && s.Mode != netopv1.EgressRouterModeRedirect {
		return nil, fmt.Errorf("spec.mode %q: only Redirect is supported", s.Mode)
	}
	c := &router.Config{Master: s.NetworkInterface.Macvlan.Master, Mode: router.Mode(s.NetworkInterface.Macvlan.Mode)}
	if c.Mode == "" {
		c.Mode = router.Bridge
	}
	if len(s.Addresses) == 0 {
		return nil, fmt.Errorf("spec.addresses: at least one address is required")
	}
	gw := map[bool]bool{}
	for i, a := range s.Addresses {
		p, err := parseAddress(a.IP)
		if err != nil {
			return nil, fmt.Errorf("spec.addresses[%d].ip: %w", i, err)
		}
		c.Addresses = append(c.Addresses, p)
		if a.Gateway == "" {
			continue
		}
		g, err := netip.ParseAddr(a.Gateway)
		if err != nil || g.Zone() != "" {
			return nil, fmt.Errorf("spec.addresses[%d].gateway %q is not an IP address", i, a.Gateway)
		}
		if g.Is4() != p.Addr().Is4() {
			return nil, fmt.Errorf("spec.addresses[%d].gateway %s is not of the family of %s", i, g, p)
		}
		if !gw[g.Is4()] { // the first gateway of a family is its default route
			gw[g.Is4()] = true
			c.Gateways = append(c.Gateways, g)
		}
	}
	if s.Redirect != nil {
		for i, r := range s.Redirect.RedirectRules {
			rule, err := compileRule(r)
			if err != nil {
				return nil, fmt.Errorf("spec.redirect.redirectRules[%d]: %w", i, err)
			}
			c.Rules = append(c.Rules, rule)
		}
		if s.Redirect.FallbackIP != "" {
			f, err := netip.ParseAddr(s.Redirect.FallbackIP)
			if err != nil || f.Zone() != "" {
				return nil, fmt.Errorf("spec.redirect.fallbackIP %q is not an IP address", s.Redirect.FallbackIP)
			}
			c.Fallback = f.Unmap()
		}
	}
	c.ClusterNetworks = clusterNetworks
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}
	return c, nil
}

// parseAddress takes a CIDR (the API's form, e.g. 192.168.12.99/24) or a bare address (a host
// prefix).
func parseAddress(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not an IP address with prefix length", s)
		}
		return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an IP address with prefix length", s)
	}
	return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()), nil
}

func compileRule(r netopv1.L4RedirectRule) (router.Rule, error) {
	proto, ok := map[netopv1.ProtocolType]uint8{netopv1.ProtocolTypeTCP: router.TCP, netopv1.ProtocolTypeUDP: router.UDP, netopv1.ProtocolTypeSCTP: router.SCTP}[r.Protocol]
	if !ok {
		return router.Rule{}, fmt.Errorf("protocol %q is not TCP, UDP or SCTP", r.Protocol)
	}
	dst, err := netip.ParseAddr(r.DestinationIP)
	if err != nil || dst.Zone() != "" {
		return router.Rule{}, fmt.Errorf("destinationIP %q is not an IP address", r.DestinationIP)
	}
	if r.Port < 1 || r.Port > 65535 {
		return router.Rule{}, fmt.Errorf("port %d is not 1-65535", r.Port)
	}
	target := r.TargetPort
	if target == 0 {
		target = r.Port
	}
	if target < 1 || target > 65535 {
		return router.Rule{}, fmt.Errorf("targetPort %d is not 1-65535", r.TargetPort)
	}
	return router.Rule{Protocol: proto, Port: uint16(r.Port), Destination: netip.AddrPortFrom(dst.Unmap(), uint16(target))}, nil
}

// specHash identifies a spec: a router pod made for another spec is replaced.
func specHash(spec *netopv1.EgressRouterSpec) string {
	b, _ := json.Marshal(spec) // a struct of strings and numbers always marshals
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}
