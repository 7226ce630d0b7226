package addresses

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/test/netns"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedLifetime: an egress address whose agent keeps renewing it stays; once the
// renewals stop (the agent is gone, its node alive), the kernel removes it after its lifetime,
// so it no longer answers for an egress IP the cluster moved elsewhere.
func TestPrivilegedLifetime(t *testing.T) {
	privileged.Require(t)
	eip := netip.MustParseAddr("192.0.2.77")
	node, a := egressNode(t, "life", "192.0.2.1/24", 2*time.Second, []dataplane.Address{{Origin: dataplane.Origin{Kind: "EgressIP", Name: "e"}, Addr: eip}})
	// Renewed every 600 ms for 4 s (twice the lifetime): still there.
	for range 7 {
		time.Sleep(600 * time.Millisecond) // the agent's renewal period, under test
		if err := node.Do(a.Renew); err != nil {
			t.Fatal(err)
		}
	}
	if got := shown(t, node, eip); len(got) != 1 {
		t.Fatalf("a renewed address went: %v", got)
	}
	// No more renewals: gone within its lifetime (plus the kernel's address check period).
	deadline := time.Now().Add(10 * time.Second)
	for len(shown(t, node, eip)) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("an address no longer renewed is still there 10 s after its 2 s lifetime")
		}
		time.Sleep(200 * time.Millisecond) // waiting for the kernel's expiry, nothing to poll on
	}
}

// BenchmarkPrivilegedRenew: the periodic renewal of an egress node's 100 egress addresses (it
// runs every 5 s on every egress node).
func BenchmarkPrivilegedRenew(b *testing.B) {
	privileged.Require(b)
	var want []dataplane.Address
	for i := range 100 {
		want = append(want, dataplane.Address{Origin: dataplane.Origin{Kind: "EgressIP", Name: fmt.Sprint(i)}, Addr: netip.AddrFrom4([4]byte{10, 0, 1, byte(i)})})
	}
	node, a := egressNode(b, "renew", "10.0.0.1/16", time.Minute, want)
	if err := node.Do(func() error {
		for b.Loop() {
			if err := a.Renew(); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
}

// egressNode is a namespace whose eth0, addressed cidr, links to another, and in which
// Addresses owns want, valid for lifetime.
func egressNode(tb testing.TB, name, cidr string, lifetime time.Duration, want []dataplane.Address) (*netns.NS, *Addresses) {
	tb.Helper()
	node := netns.New(tb, name)
	side := netns.New(tb, name+"side")
	netns.Veth(tb, node, "eth0", side, "eth0")
	node.Addr(tb, "eth0", cidr)
	var a *Addresses
	if err := node.Do(func() (err error) {
		if a, err = New(DefaultProtocol, lifetime); err != nil {
			return err
		}
		if failed := a.Apply(want); len(failed) > 0 {
			return fmt.Errorf("apply: %v", failed)
		}
		return nil
	}); err != nil {
		tb.Fatal(err)
	}
	return node, a
}
