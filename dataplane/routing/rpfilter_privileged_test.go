package routing

import (
	"slices"
	"testing"

	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedReplyInterfaces: the interfaces egressd's IPv4 routes send traffic through (gw1's
// e1 and gw2's e2 in testState), except the one main's default route uses, and lo; here those
// whose reverse path filter is strict (the larger of all's and theirs is 1). The same of the
// IPv6 routes (ReplyInterfaces6, for the firewall's checks), none of them a copied table's.
func TestPrivilegedReplyInterfaces(t *testing.T) {
	privileged.Require(t)
	l := newLab(t)
	r := l.router(t)
	// Twice: the second reads back what the first wrote (an IPv6 blackhole is on lo, which is
	// never reported, nor is any IPv6 route's interface by ReplyInterfaces).
	for range 2 {
		if errs := r.Apply(testState(), nil); len(errs) != 0 {
			t.Fatal(errs)
		}
	}
	for _, step := range []struct {
		name   string
		script []string
		want   []string
	}{
		{"all loose", []string{"sysctl -qw net.ipv4.conf.all.rp_filter=0", "sysctl -qw net.ipv4.conf.e1.rp_filter=0", "sysctl -qw net.ipv4.conf.e2.rp_filter=0"}, nil},
		{"all strict", []string{"sysctl -qw net.ipv4.conf.all.rp_filter=1"}, []string{"e1", "e2"}},
		{"main's default through e1", []string{"ip route replace default via 10.1.1.2"}, []string{"e2"}},
		{"e2 loose, all strict (the larger wins)", []string{"sysctl -qw net.ipv4.conf.e2.rp_filter=2"}, nil},
		{"all loose, e2 strict", []string{"sysctl -qw net.ipv4.conf.all.rp_filter=0", "sysctl -qw net.ipv4.conf.e2.rp_filter=1"}, []string{"e2"}},
	} {
		if err := l.r.Script(step.script...); err != nil {
			t.Fatal(err)
		}
		if got := l.strictReplyInterfaces(t, r); !slices.Equal(got, step.want) {
			t.Errorf("%s: %v, want %v", step.name, got, step.want)
		}
	}
	if got := l.replyInterfaces6(t, r); !slices.Equal(got, []string{"e1", "e2"}) {
		t.Errorf("ReplyInterfaces6: %v, want [e1 e2] (main's IPv6 default route is e3's)", got)
	}
	if err := l.r.Script("ip -6 route replace default via fd01:2::2"); err != nil {
		t.Fatal(err)
	}
	if got := l.replyInterfaces6(t, r); !slices.Equal(got, []string{"e1"}) {
		t.Errorf("ReplyInterfaces6 with main's IPv6 default route through e2: %v, want [e1]", got)
	}
}
