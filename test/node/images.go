package node

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
)

// Image is an OCI image archive and the reference it carries.
type Image struct {
	Ref, Archive string
}

// Images the lab's real node runs besides egressd's.
const (
	// PauseRef is the node's sandbox image (containerd's pinned sandbox).
	PauseRef = "egressd.test/pause:1"
	// PodRef is the test pods' image: cmd/labpod.
	PodRef = "egressd.test/labpod:1"
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// StaticBinaries builds packages of this repository (e.g. ./cmd/egressd) as static binaries
// into dir, with version as internal/version.Version, as the Dockerfile does.
func StaticBinaries(log io.Writer, dir, version string, pkgs ...string) error {
	start := time.Now()
	args := append([]string{"build", "-trimpath", "-ldflags",
		"-s -w -X github.com/egressd/egressd/internal/version.Version=" + version, "-o", dir + "/"}, pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Dir = repoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %v (static): %v\n%s", pkgs, err, out)
	}
	fmt.Fprintf(log, "built %v (static, version %s) in %s\n", pkgs, version, time.Since(start).Round(time.Millisecond))
	return nil
}

// BuildImage writes an OCI image archive at out: one layer holding files (path in the image ->
// file here) on an empty base, with entrypoint.
func BuildImage(ociimage, out, ref, entrypoint string, files map[string]string) (Image, error) {
	args := []string{"build", "-o", out, "-ref", ref, "-entrypoint", entrypoint}
	var dsts []string
	for dst := range files {
		dsts = append(dsts, dst)
	}
	sort.Strings(dsts)
	for _, dst := range dsts {
		args = append(args, files[dst]+"="+dst)
	}
	if b, err := exec.Command(ociimage, args...).CombinedOutput(); err != nil {
		return Image{}, fmt.Errorf("image %s: %v: %s", ref, err, b)
	}
	return Image{Ref: ref, Archive: out}, nil
}

// EgressdImage builds the DaemonSet's image, as the Dockerfile does: static egressd, egressctl
// (the documented cleanup), egressd-cni (which the agent installs into the node's CNI chain) and
// the helper it runs for router pods in /usr/local/bin, egressd the entrypoint.
func EgressdImage(log io.Writer, ociimage, dir, ref, version string) (Image, error) {
	bin := filepath.Join(dir, "egressd-"+version)
	if err := StaticBinaries(log, bin, version, "./cmd/egressd", "./cmd/egressctl", "./cmd/egressd-cni", "./cmd/egressd-cni-router"); err != nil {
		return Image{}, err
	}
	return BuildImage(ociimage, filepath.Join(dir, "egressd-"+version+".oci.tar"), ref, "/usr/local/bin/egressd", map[string]string{
		"/usr/local/bin/egressd":            filepath.Join(bin, "egressd"),
		"/usr/local/bin/egressctl":          filepath.Join(bin, "egressctl"),
		"/usr/local/bin/egressd-cni":        filepath.Join(bin, "egressd-cni"),
		"/usr/local/bin/egressd-cni-router": filepath.Join(bin, "egressd-cni-router"),
	})
}

// LabImages builds the pause image and the test pods' image into dir.
func LabImages(log io.Writer, ociimage, dir string) ([]Image, error) {
	bin := filepath.Join(dir, "lab-bin")
	if err := StaticBinaries(log, bin, "lab", "./test/node/cmd/pause", "./test/node/cmd/labpod"); err != nil {
		return nil, err
	}
	pause, err := BuildImage(ociimage, filepath.Join(dir, "pause.oci.tar"), PauseRef, "/pause",
		map[string]string{"/pause": filepath.Join(bin, "pause")})
	if err != nil {
		return nil, err
	}
	pod, err := BuildImage(ociimage, filepath.Join(dir, "labpod.oci.tar"), PodRef, "/labpod",
		map[string]string{"/labpod": filepath.Join(bin, "labpod")})
	if err != nil {
		return nil, err
	}
	return []Image{pause, pod}, nil
}

// Import loads image archives into the node's containerd (the CRI's namespace, unpacked), as
// a pull from a registry would leave them.
func (n *Node) Import(imgs ...Image) error {
	args := []string{"import", "-address", n.Socket, "-namespace", "k8s.io"}
	var refs []string
	for _, i := range imgs {
		args = append(args, i.Archive)
		refs = append(refs, i.Ref)
	}
	out, err := exec.Command(n.opts.Bins.OCIImage, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("import %s into %s: %v: %s", strings.Join(refs, ", "), n.Name, err, out)
	}
	n.logf("real node %s: %s", n.Name, strings.TrimSpace(string(out)))
	return nil
}
