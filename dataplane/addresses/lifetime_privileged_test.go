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
	node := netns.New(t, "life")
	side := netns.New(t, "lifeside")
	netns.Veth(t, node, "eth0", side, "eth0")
	node.Addr(t, "eth0", "192.0.2.1/24")
	eip := netip.MustParseAddr("192.0.2.77")
	var a *Addresses
	if err := node.Do(func() (err error) {
		if a, err = New(DefaultProtocol, 2*time.Second); err != nil {
			return err
		}
		if failed := a.Apply([]dataplane.Address{{Origin: dataplane.Origin{Kind: "EgressIP", Name: "e"}, Addr: eip}}); len(failed) > 0 {
			return fmt.Errorf("apply: %v", failed)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
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
	node := netns.New(b, "renew")
	side := netns.New(b, "renewside")
	netns.Veth(b, node, "eth0", side, "eth0")
	node.Addr(b, "eth0", "10.0.0.1/16")
	var want []dataplane.Address
	for i := range 100 {
		want = append(want, dataplane.Address{Origin: dataplane.Origin{Kind: "EgressIP", Name: fmt.Sprint(i)}, Addr: netip.AddrFrom4([4]byte{10, 0, 1, byte(i)})})
	}
	var a *Addresses
	if err := node.Do(func() (err error) {
		if a, err = New(DefaultProtocol, time.Minute); err != nil {
			return err
		}
		if failed := a.Apply(want); len(failed) > 0 {
			return fmt.Errorf("apply: %v", failed)
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
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
