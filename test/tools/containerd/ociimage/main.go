// Command ociimage builds OCI image archives without a registry or a Docker engine, and imports
// them into containerd with its Go client (test/node, make image-archive).
//
//	ociimage build -o OUT.tar -ref NAME:TAG -entrypoint /path [-env K=V]... SRC=/DST...
//	ociimage import -address SOCK -namespace NS ARCHIVE.tar...
//
// An image is one layer holding the given files (static binaries, mode 0755, owned by root) on
// an empty base, for linux/amd64 or the machine's architecture. The archive is an OCI image
// layout in a tar, its index naming the image both as OCI (org.opencontainers.image.ref.name)
// and as containerd (io.containerd.image.name) expect.
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "build":
		err = build(os.Args[2:])
	case "import":
		err = importArchives(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: ociimage build -o OUT.tar -ref NAME:TAG -entrypoint PATH [-env K=V]... SRC=DST... | ociimage import -address SOCK -namespace NS ARCHIVE...")
	os.Exit(2)
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func build(args []string) error {
	fs := flag.NewFlagSet("build", flag.ExitOnError)
	out := fs.String("o", "", "archive to write")
	ref := fs.String("ref", "", "image reference, e.g. ghcr.io/egressd/egressd:v1")
	entrypoint := fs.String("entrypoint", "", "entrypoint (a path in the image)")
	var env multi
	fs.Var(&env, "env", "environment variable K=V (repeatable)")
	_ = fs.Parse(args)
	if *out == "" || *ref == "" || *entrypoint == "" || fs.NArg() == 0 {
		usage()
	}
	tag, err := name.NewTag(*ref)
	if err != nil {
		return fmt.Errorf("image reference %q: %w", *ref, err)
	}
	layer, err := filesLayer(fs.Args())
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Config.Entrypoint = []string{*entrypoint}
	cfg.Config.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin"}, env...)
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}
	// Media types as registries serve them today (go-containerregistry's default is Docker's).
	img = mutate.MediaType(img, "application/vnd.oci.image.manifest.v1+json")
	img = mutate.ConfigMediaType(img, "application/vnd.oci.image.config.v1+json")
	dir, err := os.MkdirTemp("", "ociimage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag.String(),
		"io.containerd.image.name":          tag.String(),
	}), layout.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH})); err != nil {
		return fmt.Errorf("write image %s: %w", tag, err)
	}
	if err := tarDir(dir, *out); err != nil {
		return fmt.Errorf("write archive %s: %w", *out, err)
	}
	digest, _ := img.Digest()
	fmt.Printf("%s %s %s\n", *out, tag, digest)
	return nil
}

// filesLayer is a layer of SRC=DST files with their parent directories, at a fixed time so that
// the same binaries give the same digest.
func filesLayer(specs []string) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	written := map[string]bool{}
	for _, s := range specs {
		src, dst, ok := strings.Cut(s, "=")
		if !ok || !strings.HasPrefix(dst, "/") {
			return nil, fmt.Errorf("file %q: want SRC=/DST", s)
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return nil, err
		}
		rel := strings.TrimPrefix(dst, "/")
		var parents []string
		for d := filepath.Dir(rel); d != "."; d = filepath.Dir(d) {
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			if written[d] {
				continue
			}
			written[d] = true
			if err := tw.WriteHeader(&tar.Header{Name: d + "/", Mode: 0o755, ModTime: epoch, Typeflag: tar.TypeDir}); err != nil {
				return nil, err
			}
		}
		if err := tw.WriteHeader(&tar.Header{Name: rel, Mode: 0o755, Size: int64(len(data)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
}

// tarDir writes the files under dir (an OCI layout) into a tar archive at out.
func tarDir(dir, out string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		hdr, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		hdr.ModTime = time.Unix(0, 0)
		if err := tw.WriteHeader(hdr); err != nil || !info.Mode().IsRegular() {
			return err
		}
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func importArchives(args []string) error {
	fs := flag.NewFlagSet("import", flag.ExitOnError)
	address := fs.String("address", "", "containerd socket")
	ns := fs.String("namespace", "k8s.io", "containerd namespace (the CRI's is k8s.io)")
	snapshotter := fs.String("snapshotter", "overlayfs", "snapshotter to unpack into")
	_ = fs.Parse(args)
	if *address == "" || fs.NArg() == 0 {
		usage()
	}
	client, err := containerd.New(*address, containerd.WithTimeout(10*time.Second))
	if err != nil {
		return fmt.Errorf("connect to containerd at %s: %w", *address, err)
	}
	defer client.Close()
	ctx := namespaces.WithNamespace(context.Background(), *ns)
	for _, path := range fs.Args() {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		imgs, err := client.Import(ctx, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("import %s: %w", path, err)
		}
		if len(imgs) == 0 {
			return fmt.Errorf("import %s: the archive names no image", path)
		}
		for _, i := range imgs {
			// The CRI runs only unpacked images; it would otherwise try to pull.
			if err := containerd.NewImage(client, i).Unpack(ctx, *snapshotter); err != nil {
				return fmt.Errorf("unpack %s from %s: %w", i.Name, path, err)
			}
			fmt.Printf("imported %s %s\n", i.Name, i.Target.Digest)
		}
	}
	return nil
}
