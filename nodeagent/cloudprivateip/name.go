// Package cloudprivateip is the requester side of OpenShift's CloudPrivateIPConfig protocol, as
// upstream's cluster-manager speaks it: in cloud mode the EgressIP leader asks the
// cloud-network-config-controller (CNCC) to attach each egress IP to its node's NIC by creating
// a CloudPrivateIPConfig named after the IP, and publishes an assignment in the EgressIP's
// status only once the CNCC reports it done. The decisions here are pure; Requester makes the
// API calls.
package cloudprivateip

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"
)

// OwnerAnnotation names the EgressIP a CloudPrivateIPConfig was requested for (upstream's
// util.OVNEgressIPOwnerRefLabel).
const OwnerAnnotation = "k8s.ovn.org/egressip-owner-ref"

// Name is the CloudPrivateIPConfig name of an IP: the IPv4 address itself, or the IPv6 address
// as eight dot-separated groups of four hex digits (object names cannot hold colons), e.g.
// fc00.f853.0ccd.e793.0000.0000.0000.0054.
func Name(ip netip.Addr) string {
	ip = ip.Unmap()
	if ip.Is4() {
		return ip.String()
	}
	b := ip.As16()
	h := hex.EncodeToString(b[:])
	groups := make([]string, 0, 8)
	for i := 0; i < len(h); i += 4 {
		groups = append(groups, h[i:i+4])
	}
	return strings.Join(groups, ".")
}

// ParseName is the inverse of Name.
func ParseName(name string) (netip.Addr, error) {
	if ip, err := netip.ParseAddr(name); err == nil && ip.Is4() {
		return ip, nil
	}
	groups := strings.Split(name, ".")
	if len(groups) != 8 {
		return netip.Addr{}, fmt.Errorf("CloudPrivateIPConfig %s: the name is not an IPv4 address nor eight groups of four hex digits", name)
	}
	b, err := hex.DecodeString(strings.Join(groups, ""))
	if err != nil || len(b) != 16 {
		return netip.Addr{}, fmt.Errorf("CloudPrivateIPConfig %s: the name is not an IPv4 address nor eight groups of four hex digits", name)
	}
	return netip.AddrFrom16([16]byte(b)), nil
}
