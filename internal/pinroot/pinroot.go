// Package pinroot is where egressd pins its BPF objects unless told otherwise, for the agent
// and egressctl alike: in the DaemonSet only that directory of the node's bpffs is mounted, at
// another path of the container (a mount point cannot be made inside the container's
// read-only sysfs), which $EGRESSD_BPF_PIN_ROOT names, so that `kubectl exec ... egressctl`
// finds it too.
package pinroot

import "os"

// Env names the pin root when set.
const Env = "EGRESSD_BPF_PIN_ROOT"

// Default is $EGRESSD_BPF_PIN_ROOT, else /sys/fs/bpf/egressd.
func Default() string {
	if d := os.Getenv(Env); d != "" {
		return d
	}
	return "/sys/fs/bpf/egressd"
}
