package controlplane

import (
	"io"
	"path/filepath"

	"github.com/egressd/egressd/test/toolbuild"
)

// Binaries are the paths of the control-plane programs.
type Binaries struct {
	Etcd, APIServer, ControllerManager string
}

// Build returns the control-plane binaries, building them from test/tools on the first call for
// a given go.mod/go.sum/source (a cold build takes minutes; progress goes to log).
func Build(log io.Writer) (Binaries, error) {
	out, err := toolbuild.ControlPlane(log)
	if err != nil {
		return Binaries{}, err
	}
	return Binaries{
		Etcd:              filepath.Join(out, "etcd"),
		APIServer:         filepath.Join(out, "kube-apiserver"),
		ControllerManager: filepath.Join(out, "kube-controller-manager"),
	}, nil
}
