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
// write access there (it only chains the plugin, in the configuration directory). The outcome
// goes to the status file, which the agent reads: after a failure it leaves the chain alone
// (new pods are programmed from the API only), and the command still succeeds: an init
// container that fails would keep the agent from starting at all, leaving the node without
// egress policies.
func installCNI(args []string, stderr io.Writer) int {
	flags := flag.NewFlagSet("egressd install-cni", flag.ContinueOnError)
	flags.SetOutput(stderr)
	binDir := flags.String("cni-bin-dir", "/opt/cni/bin", "the host's CNI plugin directory (as mounted)")
	binary := flags.String("cni-plugin-binary", defaultCNIBinary(), "the egressd-cni executable to install, with egressd-cni-router from its directory")
	statusFile := flags.String("status-file", cniinstall.DefaultStatusFile, "where the outcome is written for the agent")
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	err := cniinstall.InstallBinary(*binary, *binDir, log)
	if err != nil {
		log.Error("egressd-cni not installed: the agent will not chain it", "err", err)
	}
	if werr := cniinstall.WriteStatus(*statusFile, err); werr != nil {
		fmt.Fprintln(stderr, "egressd install-cni: write the status file:", werr)
		return 1
	}
	return 0
}
