package node

import (
	"io"
	"path/filepath"

	"github.com/egressd/egressd/test/toolbuild"
)

// Binaries are the programs of a real node.
type Binaries struct {
	// Kubelet and Scheduler come from test/tools/node (k8s.io/kubernetes at the control plane's
	// version); the scheduler runs in the control plane (controlplane.Options.Scheduler).
	Kubelet, Scheduler string
	// Containerd, its runc shim and OCIImage (image archives, imports) come from
	// test/tools/containerd. runc is Debian's (hack/install-deps.sh installs it); Start finds it.
	Containerd, Shim, OCIImage string
}

// Build returns the node's binaries, building each module's on the first call for its go.mod,
// go.sum and sources into toolbuild.CacheDir() (cold: minutes; progress goes to log).
func Build(log io.Writer) (Binaries, error) {
	k8s, err := toolbuild.Kubernetes(log)
	if err != nil {
		return Binaries{}, err
	}
	ctrd, err := buildContainerd(log)
	if err != nil {
		return Binaries{}, err
	}
	return Binaries{
		Kubelet: filepath.Join(k8s, "kubelet"), Scheduler: filepath.Join(k8s, "kube-scheduler"),
		Containerd: filepath.Join(ctrd, "containerd"), Shim: filepath.Join(ctrd, "containerd-shim-runc-v2"),
		OCIImage: filepath.Join(ctrd, "ociimage"),
	}, nil
}

// OCIImage returns the image tool (test/tools/containerd/ociimage), building test/tools/containerd
// if needed, without the kubelet (make image-archive).
func OCIImage(log io.Writer) (string, error) {
	dir, err := buildContainerd(log)
	return filepath.Join(dir, "ociimage"), err
}

func buildContainerd(log io.Writer) (string, error) {
	return toolbuild.Cached(log, "containerd", []string{"ociimage/main.go"},
		"github.com/containerd/containerd/v2/cmd/containerd",
		"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2",
		"./ociimage")
}
