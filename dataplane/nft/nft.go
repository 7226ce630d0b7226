// Package nft owns the nftables table inet egressd, shared by every feature that needs a
// judgement or a rewrite nftables does better than the tc classifier: after DNAT, at NAT time,
// or after every NAT. Each Apply changes the table in one transaction, so the kernel goes from
// the old content to the new at once.
//
// # Contract (names and priorities are part of the operator contract)
//
// Base chains, one per hook and purpose, are named <hook>_<standard priority name>, sit at a
// priority relative to the standard one, and hold nothing but jumps to the features' regular
// chains, so that one feature's content never touches another's. A base chain, and each jump,
// exists only while its feature has elements on the node: every chain on a hook costs every
// packet that passes it, so a node without EgressIP, steering, Service backends to judge, or
// pods whose DNS answers the agent reads has none.
//
//	prerouting_mangle   type filter hook prerouting  priority mangle - 10   -> egressip_prerouting, extroute_prerouting
//	prerouting_dstnat   type filter hook prerouting  priority dstnat + 10   -> steer_unmarked
//	prerouting_route    type filter hook prerouting  priority 300           -> egressip_reverse_path, steer_replies
//	forward_mangle      type filter hook forward     priority mangle        -> qos_service_backends
//	forward_filter      type filter hook forward     priority filter        -> fw_service_backends, fw_frontends_without_dnat, dns_snoop
//	input_filter        type filter hook input       priority filter        -> fw_service_backends
//	input_srcnat        type filter hook input       priority srcnat + 1    -> fw_frontends_without_dnat
//	output_filter       type filter hook output      priority filter        -> dns_snoop
//	postrouting_srcnat  type nat    hook postrouting priority srcnat - 10   -> egressip_snat
//	postrouting_guard   type filter hook postrouting priority srcnat + 200  -> egressip_guard
//
// postrouting_srcnat runs before the CNI's masquerade (at srcnat): netfilter consults the NAT
// chains of a hook only until one makes a binding, so a snat here, even to the packet's own
// source, keeps a later masquerade from touching the connection. postrouting_guard runs after
// every NAT chain and so sees the source address a packet will leave with; after its jump it
// clears egressd's mark bits of what leaves through the tunnel device (dataplane.TunnelDevice):
// the encapsulated packet is routed with the inner packet's mark, which would select the
// steering table again. prerouting_mangle runs before mangle (where ip6tables' rpfilter is)
// and prerouting_route after every standard priority: between them, the replies of an IPv6
// egress IP on a secondary network carry its table's mark through firewalls' reverse path
// checks (reversepath.go).
//
// Regular chains and their sets (every set exists, possibly empty, as long as the table does;
// "4"/"6" are the IPv4 and IPv6 twins):
//
//   - fw_service_backends: drops a local pod's DNATed traffic to a Service backend its
//     EgressFirewall denies: set fw_backend_deny4/6 (pod . backend . l4proto . port), with a
//     counter per element (its drops are also ACL-logged from these counters when the
//     namespace asks, acllog.go). Both forward_filter (a backend elsewhere) and input_filter (a backend
//     on this node: a hostNetwork endpoint, the API server on a control-plane node) jump here.
//   - fw_frontends_without_dnat: rejects (fw_frontend_reject: TCP reset, else icmpx
//     port-unreachable), counted by the named counter fw_frontend_drops, a new or untracked flow of a local pod under an EgressFirewall (set
//     fw_pods4/6) to a Service's frontend (set fw_frontends4/6: address . l4proto . port; the
//     classifier let it through to be judged by its backend) that DNAT did not translate.
//     input_srcnat jumps here after IPVS (priorities 98, 99), which takes what it translates.
//   - qos_service_backends: sets the DSCP EgressQoS gives a local pod's DNATed traffic to a
//     Service backend (upstream's to-lport QoS sees the backend): verdict map
//     qos_backend_dscp4/6 (pod . backend . l4proto . port : jump qos_dscp_<n>).
//   - qos_dscp_<n>: ip dscp set n, ip6 dscp set n (ECN kept); one chain per DSCP value in use
//     (a change of these values writes the table whole).
//   - egressip_prerouting: clears the steering mark bits of reply packets, so that replies of
//     connections initiated from outside (NodePort, LoadBalancer, direct) are never steered.
//   - egressip_snat: first, an identity SNAT of the steered packets of the local pods of set
//     egressip_spread4/6 (on an egress node, their flows spread over the other egress nodes
//     too: those steered keep their pod source); SNAT to the egress IP by map
//     egressip_snat4/6 (pod : egress IP), unless the
//     destination is in the interval set egressip_exempt4/6 (cluster networks, node addresses);
//     then an identity SNAT of steered packets (mark bits set), keeping their pod source;
//     then drops, counted by egressip_leaks, a guarded pod's new connection to a non-exempt
//     destination that got neither (before the CNI's masquerade could bind it to the node's
//     address for the flow's life). A pod whose NAT here changes has its connections' conntrack
//     entries deleted after the write (conntrack.go), so its flows are NATed afresh.
//   - egressip_guard: counts what left SNATed per egress IP (set egressip_addrs4/6, a counter
//     per element); drops, counted by egressip_misrouted, what leaves with an egress IP of a
//     secondary network (set egressip_secondary4/6) through another interface than the one
//     holding it (fib saddr . oif type != local); sends steered packets to
//     egressip_guard_steered; drops, counted by the
//     named counter egressip_leaks, what a guarded pod (set egressip_guarded4/6) sends to a
//     non-exempt destination still with its pod source. Reply packets are never judged.
//   - egressip_guard_steered: lets a steered packet leave only through a steering device (set
//     egressip_steer_devices) or towards the egress node of its mark (set
//     egressip_steer_nexthops4/6 of mark . route nexthop); otherwise, if it still carries its
//     pod source, drops it, counted by the named counter egressip_misrouted.
//   - steer_unmarked: after DNAT (kube-proxy's, at dstnat) and before the routing decision,
//     gives a steered local pod's DNATed packet its steering mark when the classifier, which
//     saw the Service address, left it unmarked and the backend is not exempt: verdict maps
//     steer_pods4/6 (pod : jump steer_mark_<mark>); and the packets of other nodes' pods SNATed
//     here to an egress IP on a secondary network (no classifier saw them) theirs:
//     steer_remote4/6 (steering.go).
//   - steer_replies: after the reverse path checks, just before the routing decision, gives
//     the replies to other nodes' pods this node SNATs the mark of their way back: verdict maps
//     egressip_reply_pods4/6 (pod : jump steer_mark_<mark>) (steering.go).
//   - steer_mark_<mark>: sets mark under the steering mask, keeping the other bits; one chain
//     per mark in use.
//   - dns_snoop: sends the DNS answers to a local pod of set dns_pods4/6 (the pods of
//     namespaces with EgressFirewall dnsName rules) to the agent's queue (queue flags bypass
//     to <DNSSnoop.Queue>), where it reads them before they go on: reply packets of UDP and TCP
//     connections whose original destination port is 53 (ct original proto-dst, so also through
//     a Service that DNATs 53 to another port), answered by a trusted resolver, set
//     dns_resolvers4/6 (ip saddr: a Service's endpoint, not yet un-DNATed). forward_filter (a resolver elsewhere)
//     jumps here last: what comes back from the queue skips the rest of the base chain;
//     output_filter (a resolver on the node itself, such as a node-local DNS cache) too. Its
//     rules exist only while the sets have elements (a kernel without nft's queue expression
//     refuses them); a change of the queue number writes the table whole (dnssnoop.go).
//
// nft lists the guard's priority as 300 (srcnat + 200).
//
// The table is never deleted because the state is empty, only by Cleanup. If the table, a
// chain, a set or a counter is deleted behind egressd's back (the kernel's count of the
// table's objects differs), the next Apply writes the whole table again; rules flushed from a
// chain that still exists are not noticed.
package nft

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/google/nftables"
	mdnetlink "github.com/mdlayher/netlink"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/dataplane"
)

// TableName is the name of egressd's table (family inet).
const TableName = "egressd"

var table = &nftables.Table{Family: nftables.TableFamilyINet, Name: TableName}

// Counters of packets and bytes.
type Counters struct {
	Packets, Bytes uint64
}

func (c Counters) plus(d Counters) Counters {
	return Counters{Packets: c.Packets + d.Packets, Bytes: c.Bytes + d.Bytes}
}

// Table programs the table.
type Table struct {
	conn *nftables.Conn
	mu   sync.Mutex // Apply and the counter readers may run concurrently
	// written is what the sets hold, by set name and element identity; nil until the first
	// Apply (a predecessor's table keeps enforcing until then).
	written contents
	// chains and targets are dynamicChains and activeTargets of written, kept with it: telling
	// them walks every reply and steering element (10,000 on an egress node), and Intact asks
	// every few seconds.
	chains, targets []string
	// mask is the steering mask the chains were written with; queue the DNS answers' queue.
	mask  uint32
	queue uint16
	// compatQueue: the kernel has no nft queue expression (dnssnoop.go).
	compatQueue bool
	// denies are the written backend denies by element key, with the EgressFirewall rule each
	// came from (kept as they are for a namespace whose firewall failed to compile).
	denies map[string]dataplane.BackendDeny
	// dscp are the written backend DSCP elements by element key, with the EgressQoS rule each
	// came from.
	dscp map[string]dataplane.BackendDSCP
	// egressIP is the EgressIP part of the last plan.
	egressIP egressIPMemo
	// replies are the reply maps of the last plan.
	replies repliesMemo
	// Counter accumulators: they keep counts of removed or reset elements so that what the
	// readers return never goes back.
	denyCounts   tally[dataplane.Origin]
	snatCounts   tally[netip.Addr]
	objectCounts tally[string]
	// drops is what ServeACLLog has logged of the backend denies' counters.
	drops dropLog
	// ct deletes conntrack entries (conntrack.go), in the table's namespace; unflushed are the
	// pod addresses whose entries are still to delete.
	ct        *netlink.Handle
	unflushed map[netip.Addr]bool
	// returns are the gateways of the return paths by mark as of the last flush of their
	// connections' entries (returnpaths.go); nil until the first flush. gatewaysGone and
	// flushedFlows count the return paths that went and their entries deleted.
	returns      map[uint32]netip.Addr
	gatewaysGone atomic.Uint64
	flushedFlows atomic.Uint64
}

// New opens a netlink connection to nftables in the current network namespace; it stays there
// whichever thread uses it later.
func New() (*Table, error) {
	c, err := nftables.New(nftables.AsLasting(), nftables.WithSockOptions(batchBuffers))
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	ct, err := netlink.NewHandle(unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("conntrack netlink socket: %w", err)
	}
	return &Table{conn: c, denyCounts: newTally[dataplane.Origin](), snatCounts: newTally[netip.Addr](),
		objectCounts: newTally[string](), drops: newDropLog(), ct: ct, unflushed: map[netip.Addr]bool{},
		compatQueue: !nativeQueue(c)}, nil
}

// Socket buffers of the connection the table is written through. A table is written whole in
// one transaction (one batch: the kernel applies all of it or none); at a large cluster's size
// (10,000 pods under EgressIPs, thousands of firewalled pods) the batch is several MB, past a
// socket's default 208 KB (the kernel refuses it: "message too long"), and the
// acknowledgement of each of its messages overflows the default receive buffer. nft(8) grows
// its buffers to its batch the same way.
const (
	batchSendBuffer    = 256 << 20
	batchReceiveBuffer = 32 << 20
)

// batchBuffers sets the buffers past the system's maximum (SO_*BUFFORCE: CAP_NET_ADMIN, which
// the agent has), else as far as the maximum allows.
func batchBuffers(c *mdnetlink.Conn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var forced error
	if err := raw.Control(func(fd uintptr) {
		forced = errors.Join(unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, batchSendBuffer),
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, batchReceiveBuffer))
	}); err != nil {
		return err
	}
	if forced != nil {
		return errors.Join(c.SetWriteBuffer(batchSendBuffer), c.SetReadBuffer(batchReceiveBuffer))
	}
	return nil
}

// Close releases the netlink connections; the table stays as programmed.
func (t *Table) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ct.Close()
	return t.conn.CloseLasting()
}

// Cleanup removes the table (egressctl cleanup); no table is not an error.
func Cleanup() error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	c.AddTable(table)
	c.DelTable(table)
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	return nil
}
