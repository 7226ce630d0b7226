// Command controlplane starts or stops a detached test control plane from the command line
// (make controlplane-up / controlplane-down); "up" prints KUBECONFIG=<path> as its last line.
// "build" only builds (or finds cached) the binaries, so that parallel tests need not.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/egressd/egressd/test/controlplane"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: controlplane up|down|build")
		os.Exit(2)
	}
	root := filepath.Join(controlplane.DefaultRoot(), "cli")
	var err error
	switch os.Args[1] {
	case "up":
		err = up(root)
	case "down":
		err = down(root)
	case "build":
		var b controlplane.Binaries
		if b, err = controlplane.Build(os.Stderr); err == nil {
			fmt.Fprintf(os.Stderr, "control plane binaries: %s\n", filepath.Dir(b.APIServer))
		}
	default:
		fmt.Fprintln(os.Stderr, "usage: controlplane up|down|build")
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "controlplane:", err)
		os.Exit(1)
	}
}

func up(root string) error {
	if dirs, _ := filepath.Glob(filepath.Join(root, "run-*")); len(dirs) > 0 {
		controlplane.Sweep(root, os.Stderr)
		if dirs, _ := filepath.Glob(filepath.Join(root, "run-*", "admin.kubeconfig")); len(dirs) > 0 {
			fmt.Fprintln(os.Stderr, "a control plane is already up; make controlplane-down stops it")
			fmt.Printf("KUBECONFIG=%s\n", dirs[0])
			return nil
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cp, err := controlplane.Start(ctx, controlplane.Options{Root: root, Detached: true, Log: os.Stderr})
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "control plane up at %s, logs in %s\n", cp.Server, cp.Dir)
	fmt.Printf("KUBECONFIG=%s\n", cp.Kubeconfig)
	return nil
}

func down(root string) error {
	dirs, _ := filepath.Glob(filepath.Join(root, "run-*"))
	if len(dirs) == 0 {
		fmt.Fprintln(os.Stderr, "no control plane is up")
		return nil
	}
	for _, d := range dirs {
		if err := controlplane.StopDir(d); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "stopped control plane %s\n", d)
	}
	return nil
}
