package e2e

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// agentHostPaths are the host paths each container of the DaemonSet may mount, and whether it
// may write there: the agent writes only its pins, its state and the CNI configuration it
// chains its plugin into; it reads the runtime's CNI results and Cilium's node configuration
// (not the directory above it, with Cilium's API socket); the init container writes the
// plugin. Anything else on the host (other components' pins, the runtime's files) stays out.
var agentHostPaths = map[string]map[string]bool{
	"egressd": {
		"/sys/fs/bpf/egressd":           true,
		"/run/egressd":                  true,
		"/etc/cni/net.d":                true,
		"/var/lib/cni/results":          false,
		"/var/run/cilium/state/globals": false,
	},
	"install-cni": {"/opt/cni/bin": true, "/run/egressd": true},
}

// TestDeployHostMounts: the DaemonSet mounts no host path beyond agentHostPaths, and none
// writable that is listed read-only (the CNI result cache a pod's bridge port is read from).
func TestDeployHostMounts(t *testing.T) {
	obj := byKindName(kustomizeBase(t))["DaemonSet/egressd"]
	if obj == nil {
		t.Fatal("deploy/ has no DaemonSet egressd")
	}
	var ds appsv1.DaemonSet
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &ds); err != nil {
		t.Fatal(err)
	}
	hostPaths := map[string]string{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	pod := ds.Spec.Template.Spec
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		for _, m := range c.VolumeMounts {
			path, ok := hostPaths[m.Name]
			if !ok {
				continue
			}
			writable, allowed := agentHostPaths[c.Name][path]
			switch {
			case !allowed:
				t.Errorf("container %s mounts host path %s, which it has no need of", c.Name, path)
			case !writable && !m.ReadOnly:
				t.Errorf("container %s mounts host path %s writable: it only reads it", c.Name, path)
			}
		}
	}
}
