package kernel

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"testing/synctest"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/dataplane/tc"
)

// tcMessage is the netlink message the kernel sends of a tc change.
func tcMessage(typ uint16, ifindex int32, parent, info uint32) syscall.NetlinkMessage {
	msg := nl.TcMsg{Ifindex: ifindex, Parent: parent, Info: info}
	return syscall.NetlinkMessage{Header: syscall.NlMsghdr{Type: typ}, Data: msg.Serialize()}
}

// TestTCDeletion: the interfaces whose hooks are looked at again are those whose clsact qdisc
// was deleted, or a filter at egressd's priority; another qdisc's or another priority's
// deletion, an addition, and a message too short to be a tc one concern no hook of egressd's.
func TestTCDeletion(t *testing.T) {
	filterInfo := func(prio uint16) uint32 { return uint32(prio)<<16 | uint32(htons(unix.ETH_P_ALL)) }
	for _, tc := range []struct {
		name string
		m    syscall.NetlinkMessage
		want int
		ok   bool
	}{
		{"clsact deleted", tcMessage(unix.RTM_DELQDISC, 7, netlink.HANDLE_CLSACT, 0), 7, true},
		{"root qdisc deleted", tcMessage(unix.RTM_DELQDISC, 7, netlink.HANDLE_ROOT, 0), 7, false},
		{"egressd's filter deleted", tcMessage(unix.RTM_DELTFILTER, 9, netlink.HANDLE_MIN_INGRESS, filterInfo(tc.Priority)), 9, true},
		{"a CNI's filter deleted", tcMessage(unix.RTM_DELTFILTER, 9, netlink.HANDLE_MIN_INGRESS, filterInfo(1)), 9, false},
		{"a filter added", tcMessage(unix.RTM_NEWTFILTER, 9, netlink.HANDLE_MIN_INGRESS, filterInfo(tc.Priority)), 0, false},
		{"clsact added", tcMessage(unix.RTM_NEWQDISC, 7, netlink.HANDLE_CLSACT, 0), 0, false},
		{"short", syscall.NetlinkMessage{Header: syscall.NlMsghdr{Type: unix.RTM_DELQDISC}, Data: make([]byte, nl.SizeofTcMsg-1)}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			idx, ok := tcDeletion(tc.m)
			if ok != tc.ok || (ok && idx != tc.want) {
				t.Errorf("tcDeletion = %d, %v; want %d, %v", idx, ok, tc.want, tc.ok)
			}
		})
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// TestUneventfulAddressEvents: address events on the pods' side of the node (link-local, in
// the cluster networks) ask for no sync; a deleted address outside them (an egress address
// removed by hand, a node address gone) and an event without an address do; with no cluster
// networks known yet, only link-local ones are ignored.
func TestUneventfulAddressEvents(t *testing.T) {
	k := &kernelEvents{}
	nets := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/56")}
	k.podNetworks.Store(&nets)
	event := func(ip string, added bool) netlink.AddrUpdate {
		return netlink.AddrUpdate{LinkAddress: net.IPNet{IP: net.ParseIP(ip)}, LinkIndex: 3, NewAddr: added}
	}
	for _, tc := range []struct {
		name string
		u    netlink.AddrUpdate
		want bool
	}{
		{"link-local IPv6 added", event("fe80::1", true), true},
		{"link-local IPv4 added", event("169.254.3.4", true), true},
		{"pod gateway deleted", event("10.244.1.1", false), true},
		{"IPv6 pod gateway deleted", event("fd00:10:244::1", false), true},
		{"egress address deleted", event("192.0.2.10", false), false},
		{"node address deleted", event("2001:db8::5", false), false},
		{"no address", netlink.AddrUpdate{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := k.uneventful(tc.u); got != tc.want {
				t.Errorf("uneventful = %v, want %v", got, tc.want)
			}
		})
	}
	if (&kernelEvents{}).uneventful(event("10.244.1.1", false)) {
		t.Error("an event in a cluster network was ignored before any Apply said which they are")
	}
}

// TestReportedErrorEndsEvents: a receiver's reported error (the library reports a message it
// cannot read and goes on without it) ends the subscription's handling, so that it is made
// anew and its caches looked up afresh, as when a receiver ends; the first error is the cause.
func TestReportedErrorEndsEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := &events{links: make(chan netlink.LinkUpdate), addrs: make(chan netlink.AddrUpdate), routes: make(chan netlink.RouteUpdate),
			neighs: make(chan netlink.NeighUpdate), tcDeleted: make(chan int), lost: make(chan struct{})}
		k := &kernelEvents{done: make(chan struct{})}
		ended := make(chan struct{})
		go func() {
			k.consume(e)
			close(ended)
		}()
		synctest.Wait()
		select {
		case <-ended:
			t.Fatal("consume ended before any error")
		default:
		}
		e.report(errors.New("first"))
		e.report(errors.New("second"))
		synctest.Wait()
		select {
		case <-ended:
		default:
			t.Fatal("consume goes on after a receiver reported an error")
		}
		if err := e.err(); err == nil || err.Error() != "first" {
			t.Errorf("cause %v, want the first error", err)
		}
	})
}
