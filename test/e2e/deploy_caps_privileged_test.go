package e2e

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/privileged"
)

// daemonSetCapabilities are the capabilities deploy/daemonset.yaml adds to the agent, after
// dropping all.
func daemonSetCapabilities(t *testing.T) []string {
	t.Helper()
	ds := byKindName(kustomizeBase(t))["DaemonSet/egressd"]
	containers, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
	sc, _ := containers[0].(map[string]any)["securityContext"].(map[string]any)
	if priv, _ := sc["privileged"].(bool); priv {
		t.Fatal("the DaemonSet runs the agent privileged")
	}
	drop, _, _ := unstructured.NestedStringSlice(sc, "capabilities", "drop")
	add, _, _ := unstructured.NestedStringSlice(sc, "capabilities", "add")
	if fmt.Sprint(drop) != "[ALL]" || len(add) == 0 {
		t.Fatalf("capabilities: drop %v, add %v; want drop [ALL] and some added", drop, add)
	}
	return add
}

// daemonSetWrap runs an agent as the runtime runs the DaemonSet's container, which is not
// privileged: /proc/sys read-only (in a mount namespace of its own), and exactly caps (setpriv:
// bounding and inheritable sets, no new privileges, as for a root container). The node is
// prepared first as docs/install.md asks (the multipath hash policies, which the agent cannot
// set from there).
func daemonSetWrap(caps []string) []string {
	set := "-all"
	for _, c := range caps {
		set += ",+" + strings.ToLower(c)
	}
	container := "sysctl -qw net.ipv4.fib_multipath_hash_policy=1 net.ipv6.fib_multipath_hash_policy=1 && exec " +
		`unshare --mount --propagation private -- sh -c 'mount -o bind,ro /proc/sys /proc/sys && exec "$@"' read-only-proc-sys "$@"`
	return []string{"sh", "-c", container, "node-prepared",
		"setpriv", "--bounding-set=" + set, "--inh-caps=-all", "--no-new-privs", "--"}
}

// TestPrivilegedDeployCapabilities runs end-to-end scenarios with every agent restricted as the
// DaemonSet's container is: the capabilities it grants (setpriv: bounding and inheritable sets,
// no new privileges, as the runtime does for a root container) and /proc/sys read-only:
// EgressIP (nftables, bpf, routing, gratuitous ARP/NA on failover; through the VXLAN tunnel, on
// a secondary network, in cloud mode), EgressService (also its network), external gateways with
// BFD and their return paths, EgressFirewall (also dnsName rules), EgressQoS, installing
// egressd-cni into the CNI directories (root without CAP_DAC_OVERRIDE).
func TestPrivilegedDeployCapabilities(t *testing.T) {
	privileged.Require(t)
	caps := daemonSetCapabilities(t)
	wrap := daemonSetWrap(caps)
	// The wrapper leaves exactly those capabilities (SYS_ADMIN not among them).
	bits := map[string]uint{"NET_ADMIN": 12, "NET_RAW": 13, "SYS_ADMIN": 21, "SYS_RESOURCE": 24, "PERFMON": 38, "BPF": 39}
	var want uint64
	for _, c := range caps {
		b, ok := bits[c]
		if !ok {
			t.Fatalf("capability %s: add its bit to this test", c)
		}
		want |= 1 << b
	}
	if want&(1<<bits["SYS_ADMIN"]) != 0 {
		t.Fatal("the DaemonSet grants SYS_ADMIN")
	}
	if out, err := exec.Command(wrap[0], append(wrap[1:], "sh", "-c", "echo 0 > /proc/sys/net/ipv4/conf/lo/rp_filter")...).CombinedOutput(); err == nil {
		t.Fatalf("under %v, /proc/sys is writable\n%s", wrap, out)
	}
	out, err := exec.Command(wrap[0], append(wrap[1:], "grep", "-E", "^Cap(Eff|Prm|Bnd)", "/proc/self/status")...).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", wrap, err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if got, err := strconv.ParseUint(f[1], 16, 64); err != nil || got != want {
			t.Fatalf("under %v, %s = %s, want %016x", wrap, f[0], f[1], want)
		}
	}
	t.Logf("agents run with %v (%016x)", caps, want)

	lab.DefaultAgentWrap = wrap
	t.Cleanup(func() { lab.DefaultAgentWrap = nil })
	for _, s := range []struct {
		name string
		test func(*testing.T)
	}{
		{"EgressIP", TestPrivilegedEgressIP},
		{"EgressIPFailover", TestPrivilegedEgressIPFailover},
		{"EgressIPVXLAN", TestPrivilegedEgressIPVXLAN},
		{"EgressIPSecondaryNetwork", TestPrivilegedEgressIPSecondaryNetwork},
		{"EgressIPCloud", TestPrivilegedEgressIPCloud},
		{"EgressService", TestPrivilegedEgressService},
		{"EgressServiceNetwork", TestPrivilegedEgressServiceNetwork},
		{"ExternalRouteReturnPaths", TestPrivilegedExternalRouteReturnPaths},
		{"EgressFirewallDNSName", TestPrivilegedEgressFirewallDNSName},
		{"ExternalRouteBFD", TestPrivilegedExternalRoute},
		{"EgressFirewall", TestPrivilegedEgressFirewall},
		{"EgressQoS", TestPrivilegedEgressQoS},
		{"CNIInstalledByTheAgent", TestPrivilegedCNIInstalledByTheAgent},
	} {
		t.Run(s.name, s.test)
	}
}
