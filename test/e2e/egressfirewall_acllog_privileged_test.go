package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedEgressFirewallACLLogging: a namespace annotated k8s.ovn.org/acl-logging gets an
// ACL log line per allowed and per denied packet at the severities it names (upstream's name
// EF:<namespace>:<priority>); removing the annotation stops it.
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
	for _, want := range []string{
		"name=EF:" + ns + ":10000 verdict=allow severity=notice direction=to-lport proto=tcp src=" + p.IPv4.String(),
		"name=EF:" + ns + ":9999 verdict=drop severity=alert direction=to-lport proto=tcp src=" + p.IPv4.String(),
	} {
		waitLog(t, agent.Log, want)
	}

	// Without the annotation nothing more is logged.
	annotate("")
	time.Sleep(500 * time.Millisecond) // the agent's sync after the namespace change
	before := strings.Count(agent.Log(), "msg=acl_log")
	checkReach(t, "not logged", []reach{{p, "203.0.113.10:80", false, lab.Timeout}})
	time.Sleep(300 * time.Millisecond)
	if after := strings.Count(agent.Log(), "msg=acl_log"); after != before {
		t.Errorf("%d ACL log lines after the annotation was removed", after-before)
	}
}

func waitLog(t *testing.T, log func() string, want string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if strings.Contains(log(), want) {
			return
		}
	}
	t.Errorf("agent log lacks %q", want)
}
