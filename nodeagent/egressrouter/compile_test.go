package egressrouter

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	netopv1 "github.com/egressd/egressd/api/networkoperator/v1"
	"github.com/egressd/egressd/dataplane/router"
)

func TestCompile(t *testing.T) {
	cluster := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
	spec := func(f func(s *netopv1.EgressRouterSpec)) *netopv1.EgressRouter {
		er := &netopv1.EgressRouter{Spec: netopv1.EgressRouterSpec{
			Mode:             netopv1.EgressRouterModeRedirect,
			NetworkInterface: netopv1.EgressRouterInterface{Macvlan: netopv1.MacvlanConfig{Mode: netopv1.MacvlanModeBridge}},
			Addresses:        []netopv1.EgressRouterAddress{{IP: "192.0.2.99/24", Gateway: "192.0.2.1"}},
			Redirect: &netopv1.RedirectConfig{
				RedirectRules: []netopv1.L4RedirectRule{
					{DestinationIP: "203.0.113.10", Port: 80, Protocol: netopv1.ProtocolTypeTCP},
					{DestinationIP: "203.0.113.11", Port: 8443, Protocol: netopv1.ProtocolTypeTCP, TargetPort: 443},
					{DestinationIP: "203.0.113.12", Port: 5000, Protocol: netopv1.ProtocolTypeSCTP},
				},
				FallbackIP: "203.0.113.99",
			},
		}}
		if f != nil {
			f(&er.Spec)
		}
		return er
	}
	for _, tc := range []struct {
		name    string
		er      *netopv1.EgressRouter
		want    *router.Config
		wantErr string
	}{
		{
			name: "upstream example: targetPort defaults to port",
			er:   spec(nil),
			want: &router.Config{Mode: router.Bridge, Addresses: []netip.Prefix{netip.MustParsePrefix("192.0.2.99/24")},
				Gateways: []netip.Addr{netip.MustParseAddr("192.0.2.1")},
				Rules: []router.Rule{
					{Protocol: router.TCP, Port: 80, Destination: netip.MustParseAddrPort("203.0.113.10:80")},
					{Protocol: router.TCP, Port: 8443, Destination: netip.MustParseAddrPort("203.0.113.11:443")},
					{Protocol: router.SCTP, Port: 5000, Destination: netip.MustParseAddrPort("203.0.113.12:5000")},
				},
				Fallback: netip.MustParseAddr("203.0.113.99"), ClusterNetworks: cluster},
		},
		{
			name: "every address, a gateway per family (upstream: addresses[0] only), master and mode kept",
			er: spec(func(s *netopv1.EgressRouterSpec) {
				s.NetworkInterface.Macvlan = netopv1.MacvlanConfig{Mode: netopv1.MacvlanModePrivate, Master: "ens5"}
				s.Addresses = []netopv1.EgressRouterAddress{{IP: "192.0.2.99/24", Gateway: "192.0.2.1"}, {IP: "192.0.2.98/24", Gateway: "192.0.2.2"},
					{IP: "2001:db8::99/64", Gateway: "2001:db8::1"}}
				s.Redirect = &netopv1.RedirectConfig{RedirectRules: []netopv1.L4RedirectRule{{DestinationIP: "2001:db8:1::10", Port: 53, Protocol: netopv1.ProtocolTypeUDP}}}
			}),
			want: &router.Config{Master: "ens5", Mode: router.Private,
				Addresses: []netip.Prefix{netip.MustParsePrefix("192.0.2.99/24"), netip.MustParsePrefix("192.0.2.98/24"), netip.MustParsePrefix("2001:db8::99/64")},
				Gateways:  []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")},
				Rules:     []router.Rule{{Protocol: router.UDP, Port: 53, Destination: netip.MustParseAddrPort("[2001:db8:1::10]:53")}}, ClusterNetworks: cluster},
		},
		{
			name: "no rules: everything to the fallback; a bare address is a host prefix; no gateway",
			er: spec(func(s *netopv1.EgressRouterSpec) {
				s.Addresses = []netopv1.EgressRouterAddress{{IP: "192.0.2.99"}}
				s.Redirect = &netopv1.RedirectConfig{FallbackIP: "192.0.2.200"}
				s.NetworkInterface.Macvlan.Mode = ""
			}),
			want: &router.Config{Mode: router.Bridge, Addresses: []netip.Prefix{netip.MustParsePrefix("192.0.2.99/32")},
				Fallback: netip.MustParseAddr("192.0.2.200"), ClusterNetworks: cluster},
		},
		{name: "no address", er: spec(func(s *netopv1.EgressRouterSpec) { s.Addresses = nil }), wantErr: "spec.addresses: at least one"},
		{name: "bad address", er: spec(func(s *netopv1.EgressRouterSpec) { s.Addresses[0].IP = "192.0.2.999/24" }), wantErr: `spec.addresses[0].ip: "192.0.2.999/24"`},
		{name: "gateway of the other family", er: spec(func(s *netopv1.EgressRouterSpec) { s.Addresses[0].Gateway = "2001:db8::1" }), wantErr: "spec.addresses[0].gateway 2001:db8::1 is not of the family"},
		{name: "bad protocol", er: spec(func(s *netopv1.EgressRouterSpec) { s.Redirect.RedirectRules[1].Protocol = "ICMP" }), wantErr: `spec.redirect.redirectRules[1]: protocol "ICMP"`},
		{name: "bad destination", er: spec(func(s *netopv1.EgressRouterSpec) { s.Redirect.RedirectRules[0].DestinationIP = "example.com" }), wantErr: `redirectRules[0]: destinationIP "example.com"`},
		{name: "port out of range", er: spec(func(s *netopv1.EgressRouterSpec) { s.Redirect.RedirectRules[2].Port = 70000 }), wantErr: "redirectRules[2]: port 70000"},
		{name: "targetPort out of range", er: spec(func(s *netopv1.EgressRouterSpec) { s.Redirect.RedirectRules[1].TargetPort = -1 }), wantErr: "redirectRules[1]: targetPort -1"},
		{name: "destination without an address of its family", er: spec(func(s *netopv1.EgressRouterSpec) {
			s.Redirect.RedirectRules[0].DestinationIP = "2001:db8::10"
		}), wantErr: "destination 2001:db8::10 has no router address of its family"},
		{name: "fallback without an address of its family", er: spec(func(s *netopv1.EgressRouterSpec) { s.Redirect.FallbackIP = "2001:db8::99" }), wantErr: "fallback 2001:db8::99 has no router address"},
		{name: "bad fallback", er: spec(func(s *netopv1.EgressRouterSpec) { s.Redirect.FallbackIP = "nope" }), wantErr: `spec.redirect.fallbackIP "nope"`},
		{name: "other mode", er: spec(func(s *netopv1.EgressRouterSpec) { s.Mode = "DNSProxy" }), wantErr: `spec.mode "DNSProxy"`},
		{name: "bad macvlan mode", er: spec(func(s *netopv1.EgressRouterSpec) { s.NetworkInterface.Macvlan.Mode = "Source" }), wantErr: `macvlan mode "Source"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := compile(tc.er, cluster)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestSpecHash(t *testing.T) {
	a := &netopv1.EgressRouterSpec{Addresses: []netopv1.EgressRouterAddress{{IP: "192.0.2.99/24"}}}
	b := a.DeepCopy()
	if specHash(a) != specHash(b) {
		t.Error("equal specs hash differently")
	}
	b.Redirect = &netopv1.RedirectConfig{FallbackIP: "192.0.2.1"}
	if specHash(a) == specHash(b) {
		t.Error("a changed spec keeps its hash: its pod would not be replaced")
	}
}
