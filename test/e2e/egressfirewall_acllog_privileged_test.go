package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/egressd/egressd/dataplane/classifier"
	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedEgressFirewallACLLogging: a namespace annotated k8s.ovn.org/acl-logging gets
// ovn-controller's acl_log lines, as upstream's e2e reads them, at the severities it names
// (upstream's name EF:<namespace>:<priority>): one per allowed connection, one per denied
// packet; removing the annotation stops them.
func TestPrivilegedEgressFirewallACLLogging(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 1, Agents: true})
	ctx := context.Background()
	if _, err := l.AddExternal("web", lab.ExternalOptions{}, "203.0.113.10"); err != nil {
		t.Fatal(err)
	}
	ns := l.CP.Namespace(t)
	annotate := func(value string) {
		t.Helper()
		patch := `{"metadata":{"annotations":{"k8s.ovn.org/acl-logging":null}}}`
		if value != "" {
			patch = `{"metadata":{"annotations":{"k8s.ovn.org/acl-logging":` + value + `}}}`
		}
		if _, err := l.CP.Client(t).CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	annotate(`"{\"deny\": \"alert\", \"allow\": \"notice\"}"`)
	p := addPod(t, l.Nodes[0], ns, "p", lab.PodOptions{})
	applyFirewall(t, l, ns, `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec:
  egress:
  - {type: Allow, to: {cidrSelector: 203.0.113.10/32}, ports: [{protocol: TCP, port: 443}]}
  - {type: Deny, to: {cidrSelector: 0.0.0.0/0}}`)
	checkReach(t, "enforced", []reach{{p, "203.0.113.10:443", false, lab.OK}, {p, "203.0.113.10:80", false, lab.Timeout}})
	agent := l.Nodes[0].Agent
	// Read as upstream's e2e reads ovn-controller's log: lines with acl_log, name="<regex>",
	// verdict=... and severity=....
	for _, want := range []struct{ name, verdict, severity string }{
		{"EF:" + ns + ":10000", "allow", "notice"},
		{"EF:" + ns + ":9999", "drop", "alert"},
	} {
		if err := poll.Until(ctx, "the ACL log line", 5*time.Second, func() error {
			if aclLogLines(agent.Log(), want.name, want.verdict, want.severity) == 0 {
				return fmt.Errorf("agent log lacks an acl_log line with name=%q, verdict=%s, severity=%s", want.name, want.verdict, want.severity)
			}
			return nil
		}); err != nil {
			t.Error(err)
		}
	}
	if line := `verdict=drop, severity=alert, direction=to-lport: tcp,nw_src=` + p.IPv4.String() + `,nw_dst=203.0.113.10,`; !strings.Contains(agent.Log(), line) {
		t.Errorf("agent log lacks %q", line)
	}
	// One line per allowed connection, not per packet (each exchange is several packets).
	before := aclLogLines(agent.Log(), "EF:"+ns+":10000", "allow", "notice")
	checkReach(t, "allowed", []reach{{p, "203.0.113.10:443", false, lab.OK}, {p, "203.0.113.10:443", false, lab.OK}, {p, "203.0.113.10:443", false, lab.OK}})
	poll.Eventually(t, "a line per allowed connection", 5*time.Second, func() error {
		if n := aclLogLines(agent.Log(), "EF:"+ns+":10000", "allow", "notice") - before; n != 3 {
			return fmt.Errorf("%d allow lines for 3 connections", n)
		}
		return nil
	})

	// Drops after DNAT (nftables judges a Service's external backend) are logged too, from the
	// deny element's counter: the backend's address and port, no source port.
	kc := l.CP.Client(t)
	svc, err := kc.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "ext"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kc.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "ext", Labels: map[string]string{discoveryv1.LabelServiceName: "ext", discoveryv1.LabelManagedBy: "egressd-e2e"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"203.0.113.10"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](80), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := l.Nodes[0].Nft(fmt.Sprintf(`table inet labproxy {
	chain pre {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr %s tcp dport 80 dnat ip to 203.0.113.10:80
	}
}`, svc.Spec.ClusterIP)); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, "the backend's deny element", 10*time.Second, func() error {
		out, err := l.Nodes[0].NS.Run("nft", "list", "set", "inet", "egressd", "fw_backend_deny4")
		if err != nil || !strings.Contains(out, "203.0.113.10 . tcp . 80") {
			return fmt.Errorf("not yet (%v):\n%s", err, out)
		}
		return nil
	})
	checkReach(t, "through the Service", []reach{{p, svc.Spec.ClusterIP + ":80", false, lab.Timeout}})
	afterDNAT := `name="EF:` + ns + `:9999", verdict=drop, severity=alert, direction=to-lport: tcp,nw_src=` + p.IPv4.String() + `,nw_dst=203.0.113.10,tp_dst=80`
	poll.Eventually(t, "the drop after DNAT logged", 5*time.Second, func() error {
		if !strings.Contains(agent.Log(), afterDNAT) {
			return fmt.Errorf("agent log lacks %q", afterDNAT)
		}
		return nil
	})

	// Without the annotation nothing more is logged: once the classifier no longer logs the
	// pod's verdicts (what egressctl reads), a denied connection adds no line.
	annotate("")
	poll.Eventually(t, "the pod's verdicts no longer logged", 10*time.Second, func() error {
		in, err := classifier.Inspect(lab.PinRoot(l.ID, l.Nodes[0].Name))
		if err != nil {
			return err
		}
		defer in.Close()
		tr, err := in.Trace(p.IPv4, netip.MustParseAddr("203.0.113.10"), 6, 80)
		if err != nil {
			return err
		}
		if tr.Verdict != "deny" || tr.Logged {
			return fmt.Errorf("trace %+v, want an unlogged deny", tr)
		}
		return nil
	})
	before = strings.Count(agent.Log(), "|acl_log(")
	checkReach(t, "not logged", []reach{{p, "203.0.113.10:80", false, lab.Timeout}})
	// Nothing to wait for: lines would be the failure. The drop happened a second ago (the
	// connection timed out), its line would have reached the log in this time.
	time.Sleep(300 * time.Millisecond)
	if after := strings.Count(agent.Log(), "|acl_log("); after != before {
		t.Errorf("%d ACL log lines after the annotation was removed", after-before)
	}
}

// aclLogLines counts the acl_log lines of log that upstream's e2e would match (its
// assertACLLogs): the name as a regular expression inside name="...", then verdict= and
// severity= anywhere in the line.
func aclLogLines(log, name, verdict, severity string) int {
	re := regexp.MustCompile(`name="` + name + `"`)
	n := 0
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "acl_log") && re.MatchString(l) &&
			strings.Contains(l, "verdict="+verdict) && strings.Contains(l, "severity="+severity) {
			n++
		}
	}
	return n
}
