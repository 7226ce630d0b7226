// Package apivalidation checks the CRDs of deploy/crds against a real API server: what upstream
// accepts and means something is accepted; garbage is rejected with a message naming the field.
package apivalidation

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egressd/egressd/test/controlplane"
	"github.com/egressd/egressd/test/kube"
)

func TestMain(m *testing.M) { controlplane.Main(m) }

func client(t *testing.T) (*kube.Client, string) {
	cp := controlplane.Shared(t)
	c, err := kube.NewClient(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	return c, cp.Namespace(t)
}

// TestExamplesAccepted applies every manifest of deploy/examples.
func TestExamplesAccepted(t *testing.T) {
	c, ns := client(t)
	files, _ := filepath.Glob("../../deploy/examples/*.yaml")
	if len(files) < 7 {
		t.Fatalf("expected an example per API in deploy/examples, found %d", len(files))
	}
	for _, f := range files {
		doc, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := kube.Decode(string(doc))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, o := range objs {
			if o.GetNamespace() != "" {
				o.SetNamespace(ns)
			}
			if _, err := c.Create(context.Background(), ns, o); err != nil {
				t.Errorf("%s: %v", filepath.Base(f), err)
			}
		}
	}
}

// Objects upstream accepts (SEMANTICS.md examples and e2e inputs) that must stay accepted.
var accepted = map[string]string{
	"firewall with every destination kind and v6": `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec:
  egress:
  - {type: Allow, to: {cidrSelector: 1.2.3.0/24}, ports: [{protocol: UDP, port: 53}, {protocol: SCTP, port: 9999}]}
  - {type: Allow, to: {cidrSelector: "2001:db8::/64"}}
  - {type: Allow, to: {dnsName: www.google.com}}
  - {type: Allow, to: {dnsName: WWW.TEST.COM.}}
  - {type: Allow, to: {dnsName: "*.example.com"}}
  - {type: Allow, to: {nodeSelector: {matchLabels: {kubernetes.io/hostname: node-a}}}}
  - {type: Deny, to: {cidrSelector: 0.0.0.0/0}}`,
	"firewall cidr with host bits (net.ParseCIDR accepts it)": `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec: {egress: [{type: Deny, to: {cidrSelector: 10.1.2.3/8}}]}`,
	"qos without dstCIDR and selector, dscp bounds": `
apiVersion: k8s.ovn.org/v1
kind: EgressQoS
metadata: {name: default}
spec:
  egress:
  - {dscp: 0}
  - {dscp: 63, dstCIDR: "2001:db8::/32", podSelector: {matchExpressions: [{key: app, operator: In, values: [a]}]}}`,
	"egressip dual-stack": `
apiVersion: k8s.ovn.org/v1
kind: EgressIP
metadata: {name: eip-dual}
spec:
  egressIPs: [192.0.2.10, "2001:db8::10"]
  namespaceSelector: {matchLabels: {a: b}}`,
	"external route dynamic with network attachment, v6 static": `
apiVersion: k8s.ovn.org/v1
kind: AdminPolicyBasedExternalRoute
metadata: {name: apb-dynamic}
spec:
  from: {namespaceSelector: {matchLabels: {a: b}}}
  nextHops:
    static: [{ip: "fd00::1", bfdEnabled: true}]
    dynamic: [{podSelector: {}, namespaceSelector: {}, networkAttachmentName: foo}]`,
	"egress service by network, empty sourceIPBy": `
apiVersion: k8s.ovn.org/v1
kind: EgressService
metadata: {name: svc-net}
spec: {sourceIPBy: Network, network: blue}
---
apiVersion: k8s.ovn.org/v1
kind: EgressService
metadata: {name: svc-empty}
spec: {}`,
	"cloud private ip config with v6 name": `
apiVersion: cloud.network.openshift.io/v1
kind: CloudPrivateIPConfig
metadata: {name: fc00.f853.0ccd.e793.0000.0000.0000.0054}
spec: {node: node-b}`,
	"egress router with defaults": `
apiVersion: network.operator.openshift.io/v1
kind: EgressRouter
metadata: {name: er-defaults}
spec:
  addresses: [{ip: 192.168.12.99/24}]
  redirect: {fallbackIP: 203.0.113.1}`,
}

func TestUpstreamObjectsAccepted(t *testing.T) {
	c, _ := client(t)
	for name, doc := range accepted {
		t.Run(name, func(t *testing.T) {
			ns := controlplane.Shared(t).Namespace(t)
			if err := c.Apply(context.Background(), ns, doc); err != nil {
				t.Fatalf("rejected: %v", err)
			}
		})
	}
}

// Each invalid object is rejected with every listed fragment in the error (field path, value).
var rejected = []struct {
	name string
	doc  string
	want []string
}{
	{"firewall not named default", `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: not-default}
spec: {egress: [{type: Allow, to: {cidrSelector: 1.2.3.0/24}}]}`,
		[]string{"metadata.name", `Invalid value: "not-default"`}},
	{"qos not named default", `
apiVersion: k8s.ovn.org/v1
kind: EgressQoS
metadata: {name: not-default}
spec: {egress: [{dscp: 1}]}`,
		[]string{"metadata.name", `Invalid value: "not-default"`}},
	{"qos dscp 64", `
apiVersion: k8s.ovn.org/v1
kind: EgressQoS
metadata: {name: default}
spec: {egress: [{dscp: 64}]}`,
		[]string{"spec.egress[0].dscp", "64", "less than or equal to 63"}},
	{"qos dscp -1", `
apiVersion: k8s.ovn.org/v1
kind: EgressQoS
metadata: {name: default}
spec: {egress: [{dscp: -1}]}`,
		[]string{"spec.egress[0].dscp", "greater than or equal to 0"}},
	{"qos bad CIDRs (upstream e2e)", `
apiVersion: k8s.ovn.org/v1
kind: EgressQoS
metadata: {name: default}
spec:
  egress:
  - {dscp: 1, dstCIDR: 1.2.3.256/32}
  - {dscp: 1, dstCIDR: 1.2.3.4/42}
  - {dscp: 1, dstCIDR: abc&!ABC/24}
  - {dscp: 1, dstCIDR: "2001:::::::7334/158"}`,
		[]string{`Invalid value: "1.2.3.256/32"`, `Invalid value: "1.2.3.4/42"`, `Invalid value: "abc&!ABC/24"`, `Invalid value: "2001:::::::7334/158"`, "spec.egress[3].dstCIDR"}},
	{"firewall bad cidrSelector", `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec: {egress: [{type: Deny, to: {cidrSelector: 10.0.0.0/33}}]}`,
		[]string{"spec.egress[0].to.cidrSelector", `Invalid value: "10.0.0.0/33"`}},
	{"firewall two destinations in one to", `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec: {egress: [{type: Deny, to: {cidrSelector: 10.0.0.0/8, dnsName: example.com}}]}`,
		[]string{"spec.egress[0].to", "Too many: 2"}},
	{"firewall empty to", `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec: {egress: [{type: Deny, to: {}}]}`,
		[]string{"spec.egress[0].to", "should have at least 1 properties"}},
	{"firewall Allowxyz", `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec: {egress: [{type: Allowxyz, to: {cidrSelector: 10.0.0.0/8}}]}`,
		[]string{"spec.egress[0].type", `Unsupported value: "Allowxyz"`}},
	{"firewall protocol TCPX", `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec: {egress: [{type: Allow, ports: [{protocol: TCPX, port: 80}], to: {cidrSelector: 10.0.0.0/8}}]}`,
		[]string{"spec.egress[0].ports[0].protocol", `Unsupported value: "TCPX"`}},
	{"firewall port 0", `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec: {egress: [{type: Allow, ports: [{protocol: TCP, port: 0}], to: {cidrSelector: 10.0.0.0/8}}]}`,
		[]string{"spec.egress[0].ports[0].port", "greater than or equal to 1"}},
	{"firewall port 65536", `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec: {egress: [{type: Allow, ports: [{protocol: UDP, port: 65536}], to: {cidrSelector: 10.0.0.0/8}}]}`,
		[]string{"spec.egress[0].ports[0].port", "less than or equal to 65535"}},
	{"firewall bad dns name", `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec: {egress: [{type: Allow, to: {dnsName: "exa mple.com"}}]}`,
		[]string{"spec.egress[0].to.dnsName"}},
	{"egressip bad IP", `
apiVersion: k8s.ovn.org/v1
kind: EgressIP
metadata: {name: eip-bad}
spec: {egressIPs: [192.0.2.10, 192.0.2.300], namespaceSelector: {}}`,
		[]string{"spec.egressIPs[1]", "must be of type ipv4"}},
	{"external route bad static IP", `
apiVersion: k8s.ovn.org/v1
kind: AdminPolicyBasedExternalRoute
metadata: {name: apb-bad}
spec:
  from: {namespaceSelector: {}}
  nextHops: {static: [{ip: 198.51.100.1%eth0}]}`,
		[]string{"spec.nextHops.static[0].ip", "must be of type ipv4"}},
	{"external route without hops", `
apiVersion: k8s.ovn.org/v1
kind: AdminPolicyBasedExternalRoute
metadata: {name: apb-empty}
spec: {from: {namespaceSelector: {}}, nextHops: {}}`,
		[]string{"spec.nextHops", "should have at least 1 properties"}},
	{"egress service bad sourceIPBy", `
apiVersion: k8s.ovn.org/v1
kind: EgressService
metadata: {name: svc}
spec: {sourceIPBy: NodeIP}`,
		[]string{"spec.sourceIPBy", `Unsupported value: "NodeIP"`}},
	{"cloud private ip config not named by IP", `
apiVersion: cloud.network.openshift.io/v1
kind: CloudPrivateIPConfig
metadata: {name: not-an-ip}
spec: {node: a}`,
		[]string{"metadata.name"}},
	{"egress router bad destination and port", `
apiVersion: network.operator.openshift.io/v1
kind: EgressRouter
metadata: {name: er}
spec:
  addresses: [{ip: 192.168.12.99/24}]
  redirect: {redirectRules: [{destinationIP: 10.0.0.999, port: 0, protocol: ICMP}]}`,
		[]string{"spec.redirect.redirectRules[0].destinationIP", "spec.redirect.redirectRules[0].port", `spec.redirect.redirectRules[0].protocol: Unsupported value: "ICMP"`}},
	{"egress router redirect mode without redirect", `
apiVersion: network.operator.openshift.io/v1
kind: EgressRouter
metadata: {name: er2}
spec:
  addresses: [{ip: 192.168.12.99/24}]`,
		[]string{"spec", "redirect is required when mode is Redirect"}},
}

func TestInvalidObjectsRejected(t *testing.T) {
	c, _ := client(t)
	for _, tc := range rejected {
		t.Run(tc.name, func(t *testing.T) {
			ns := controlplane.Shared(t).Namespace(t)
			err := c.Apply(context.Background(), ns, tc.doc)
			if err == nil {
				t.Fatal("accepted, want rejected")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}
