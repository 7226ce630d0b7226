// Command realnode builds what the lab's real node runs (make node-bin) and egressd's OCI image
// archive (make image-archive), without a registry or a Docker engine.
//
//	realnode build
//	realnode image-archive -o OUT.tar -ref IMAGE -version VERSION
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/egressd/egressd/test/node"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "build":
		var b node.Binaries
		if b, err = node.Build(os.Stderr); err == nil {
			fmt.Fprintf(os.Stderr, "real node binaries: %s, %s\n", filepath.Dir(b.Kubelet), filepath.Dir(b.Containerd))
		}
	case "image-archive":
		err = imageArchive(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "realnode:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: realnode build | realnode image-archive -o OUT.tar -ref IMAGE -version VERSION")
	os.Exit(2)
}

// imageArchive writes egressd's image (as the Dockerfile builds it) as an OCI archive, which
// `ctr images import`, `docker load` (Docker >= 25) and `podman load` take.
func imageArchive(args []string) error {
	fs := flag.NewFlagSet("image-archive", flag.ExitOnError)
	out := fs.String("o", "", "archive to write")
	ref := fs.String("ref", "", "image reference, e.g. ghcr.io/egressd/egressd:v1.0.0")
	version := fs.String("version", "dev", "version stamped into the binaries")
	_ = fs.Parse(args)
	if *out == "" || *ref == "" {
		usage()
	}
	tool, err := node.OCIImage(os.Stderr)
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(*out)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "egressd-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	img, err := node.EgressdImage(os.Stderr, tool, dir, *ref, *version)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return err
	}
	if err := copyFile(img.Archive, abs); err != nil {
		return err
	}
	fmt.Printf("%s: %s\n", abs, img.Ref)
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
