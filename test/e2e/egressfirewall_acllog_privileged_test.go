package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

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
