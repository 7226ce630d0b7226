// Command controlplane starts or stops a detached test control plane from the command line
// (make controlplane-up / controlplane-down). "up" prints KUBECONFIG=<path> as its last line.
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
	if len(os.Args) != 2 || (os.Args[1] != "up" && os.Args[1] != "down") {
		fmt.Fprintln(os.Stderr, "usage: controlplane up|down")
		os.Exit(2)
	}
	root := filepath.Join(controlplane.DefaultRoot(), "cli")
	var err error
	if os.Args[1] == "up" {
		err = up(root)
	} else {
		err = down(root)
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
