package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"

	flag "github.com/spf13/pflag"

	"github.com/egressd/egressd/internal/cniinstall"
)

// installCNI is the command of the DaemonSet's init container (egressd install-cni): it copies
// egressd-cni into the host's CNI plugin directory and exits, so that the agent itself needs no
// write access there (it only chains the plugin, in the configuration directory).
func installCNI(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("egressd install-cni", flag.ContinueOnError)
	fs.SetOutput(stderr)
	binDir := fs.String("cni-bin-dir", "/opt/cni/bin", "the host's CNI plugin directory (as mounted)")
	binary := fs.String("cni-plugin-binary", defaultCNIBinary(), "the egressd-cni executable to install")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	if err := cniinstall.InstallBinary(*binary, *binDir, log); err != nil {
		fmt.Fprintln(stderr, "egressd install-cni:", err)
		return 1
	}
	return 0
}
