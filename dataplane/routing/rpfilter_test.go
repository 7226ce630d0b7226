package routing

import (
	"maps"
	"net"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestDefaultsOf: the interfaces main's default route goes through are those of its unicast
// default route of the lowest metric, every member of a multipath one; a more specific route,
// a blackhole or unreachable default, and a backup default of a higher metric are not (replies
// arriving through the backup's interface are not main's).
func TestDefaultsOf(t *testing.T) {
	_, any4, _ := net.ParseCIDR("0.0.0.0/0")
	_, lan, _ := net.ParseCIDR("192.0.2.0/24")
	def := func(link, metric int, hops ...int) netlink.Route {
		r := netlink.Route{LinkIndex: link, Priority: metric, Type: unix.RTN_UNICAST}
		for _, h := range hops {
			r.MultiPath = append(r.MultiPath, &netlink.NexthopInfo{LinkIndex: h})
		}
		return r
	}
	for _, tc := range []struct {
		name   string
		routes []netlink.Route
		want   map[int]bool
	}{
		{"one", []netlink.Route{{LinkIndex: 5, Dst: lan, Type: unix.RTN_UNICAST}, def(2, 0)}, map[int]bool{2: true}},
		{"written 0.0.0.0/0", []netlink.Route{{LinkIndex: 3, Dst: any4, Type: unix.RTN_UNICAST}}, map[int]bool{3: true}},
		{"backup after", []netlink.Route{def(2, 100), def(3, 200)}, map[int]bool{2: true}},
		{"backup first", []netlink.Route{def(3, 200), def(2, 100)}, map[int]bool{2: true}},
		{"multipath", []netlink.Route{def(0, 0, 2, 4)}, map[int]bool{2: true, 4: true}},
		{"blackhole default", []netlink.Route{{Type: unix.RTN_BLACKHOLE}, def(6, 10)}, map[int]bool{6: true}},
		{"none", []netlink.Route{{LinkIndex: 5, Dst: lan, Type: unix.RTN_UNICAST}}, map[int]bool{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := defaultsOf(tc.routes)
			delete(got, 0) // a multipath route's own index: no interface
			if !maps.Equal(got, tc.want) {
				t.Errorf("defaults %v, want %v", got, tc.want)
			}
		})
	}
}
