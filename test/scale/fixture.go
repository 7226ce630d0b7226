package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/egressd/egressd/test/controlplane"
	"github.com/egressd/egressd/test/toolbuild"
)

// The populated cluster is a fixture: 300,000 pod writes (creations and kwok's status) take this
// machine's API server 25 to 45 minutes, and measure nothing of egressd. A run keeps etcd's data
// once the cluster is full, under a key of everything that makes it (the generators' source,
// kwok's and the control plane's builds, the size), and later runs start their control plane
// from a copy of it.

// fixtureSources are the files whose content decides the populated cluster, relative to
// the repository: what creates it is all in populate.go, so that an edit here keeps it.
var fixtureSources = []string{"test/scale/populate.go", "test/scale/kwok.go",
	"test/tools/kwok/go.sum", "test/tools/kwok/stages/main.go"}

const populatedFile = "populated" // in the fixture's directory: how long populating took

// populated returns the etcd data directory of a full cluster of the run's size, populating
// one now (in a control plane of its own, with kwok, no lab) when none is kept or h.fresh.
func (h *harness) populated(ctx context.Context) (string, error) {
	bins, err := controlplane.Build(h.log)
	if err != nil {
		return "", err
	}
	key, err := fixtureKey(h.s, filepath.Dir(bins.Etcd))
	if err != nil {
		return "", err
	}
	dir := filepath.Join(toolbuild.CacheDir(), "scale", h.name+"-"+key)
	data := filepath.Join(dir, "etcd-data")
	if took, err := os.ReadFile(filepath.Join(dir, populatedFile)); err == nil && !h.fresh {
		h.record("cluster populated (objects created, kwok's pods running)",
			fmt.Sprintf("kept from an earlier run (%s then), %s", strings.TrimSpace(string(took)), dir), "")
		return data, nil
	}
	h.logf("populating a cluster of size %s, kept in %s for later runs", h.name, dir)
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	cp, err := controlplane.Start(ctx, controlplane.Options{Log: h.log})
	if err != nil {
		return "", err
	}
	defer cp.Stop()
	c, err := newCluster(h, cp)
	if err != nil {
		return "", err
	}
	kwok, err := startKwok(h.log, h.dir, cp.Kubeconfig)
	if err != nil {
		return "", err
	}
	begin := time.Now()
	err = c.populate(ctx, h.dir)
	_ = kwok.Process.Kill()
	_ = kwok.Wait()
	if err != nil {
		return "", err
	}
	took := time.Since(begin).Round(time.Second)
	h.record("cluster populated (objects created, kwok's pods running)", took.String(), "")
	if err := cp.SaveEtcd(data); err != nil {
		return "", err
	}
	// Written last: a run stopped before leaves no directory that looks complete.
	return data, os.WriteFile(filepath.Join(dir, populatedFile), []byte(took.String()+" on "+time.Now().Format(time.DateOnly)), 0o644)
}

// fixtureKey names a populated cluster: the hash of its sources, the control plane's build
// (its directory names the build) and the size.
func fixtureKey(s size, controlPlane string) (string, error) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	sum := sha256.New()
	fmt.Fprintf(sum, "%+v\n%s\n", s, filepath.Base(controlPlane))
	for _, f := range fixtureSources {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(sum, "%s %d\n", f, len(b))
		sum.Write(b)
	}
	return hex.EncodeToString(sum.Sum(nil)[:8]), nil
}
