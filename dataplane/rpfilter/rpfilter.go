// Package rpfilter reads and sets interfaces' IPv4 reverse path filter
// (net.ipv4.conf.<interface>.rp_filter), and loosens it where egressd's routes bring replies in
// through another interface than the one main routes their source through; and finds the IPv6
// reverse path checks of the node's firewall (check6.go), which it only reports.
//
// Values are read from /proc/sys (readable in the agent's container) and written through
// netlink (the interface's IFLA_INET_CONF): the container runtime mounts /proc/sys read-only
// in a container that is not privileged.
package rpfilter

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Loose is rp_filter 2: a packet passes when its source is routable through any interface.
const Loose = 2

// ipv4DevconfRPFilter is IPV4_DEVCONF_RP_FILTER, the index of rp_filter among an interface's
// IPv4 settings (include/uapi/linux/ip.h).
const ipv4DevconfRPFilter = 8

// Get is net.ipv4.conf.<name>.rp_filter in the calling thread's network namespace (0 when
// unreadable: no such interface).
func Get(name string) int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/conf/" + name + "/rp_filter")
	if err != nil {
		return 0
	}
	v, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return v
}

// Strict reports whether the kernel filters what arrives on the interface strictly: it applies
// the larger of all's value and the interface's, and 1 is strict.
func Strict(name string) bool { return max(Get("all"), Get(name)) == 1 }

// Set sets the rp_filter of the interface of index to v, through netlink.
func Set(index, v int) error {
	req := nl.NewNetlinkRequest(unix.RTM_SETLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(index)
	req.AddData(msg)
	spec := nl.NewRtAttr(unix.IFLA_AF_SPEC, nil)
	conf := spec.AddRtAttr(unix.AF_INET, nil).AddRtAttr(unix.IFLA_INET_CONF, nil)
	conf.AddRtAttr(ipv4DevconfRPFilter, nl.Uint32Attr(uint32(v)))
	req.AddData(spec)
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("set rp_filter of interface %d to %d: %w", index, v, err)
	}
	return nil
}
