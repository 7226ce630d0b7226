package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/addresses"
	"github.com/egressd/egressd/dataplane/classifier"
	"github.com/egressd/egressd/dataplane/nft"
	"github.com/egressd/egressd/dataplane/routing"
	"github.com/egressd/egressd/dataplane/rpfilter"
	"github.com/egressd/egressd/dataplane/tc"
	"github.com/egressd/egressd/dataplane/tunnel"
	"github.com/egressd/egressd/internal/cniinstall"
	"github.com/egressd/egressd/watchers/dnsnames"
)

// cleanupReport lists what cleanup removed, in order, and the steps that failed (cleanup goes
// on past a failure: what it can remove, it removes).
type cleanupReport struct {
	Removed []string `json:"removed"`
	Failed  []string `json:"failed,omitempty"`
}

func (r cleanupReport) writeText(w io.Writer) error {
	for _, s := range r.Removed {
		if _, err := fmt.Fprintln(w, s); err != nil {
			return err
		}
	}
	return nil
}

// step is one removal of cleanup: what it does (for its error), what it did (for the report),
// how.
type step struct {
	do, done string
	remove   func() error
}

// cleanup removes egressd-cni from the node's CNI chain when asked, then, per kernel facility,
// what egressd owns, then the pin root itself.
func cleanup(o options) (cleanupReport, error) {
	rpState := filepath.Join(filepath.Dir(o.cniSocket), rpfilter.StateFile)
	steps := []step{
		{"detach the classifier from the pod-facing interfaces", "detached the classifier: its tc filters, and its tcx links pinned under " + tc.LinksDir(o.pinRoot),
			func() error { return tc.Cleanup(o.pinRoot) }},
		{"remove classifier maps under " + o.pinRoot, "removed classifier maps under " + o.pinRoot,
			func() error { return classifier.Cleanup(o.pinRoot) }},
		{"remove nftables table inet " + nft.TableName, "removed nftables table inet " + nft.TableName, nft.Cleanup},
		{fmt.Sprintf("remove egress addresses (protocol %d)", addresses.DefaultProtocol),
			fmt.Sprintf("removed egress addresses stamped with protocol %d", addresses.DefaultProtocol),
			func() error { return addresses.Cleanup(addresses.DefaultProtocol) }},
		{"remove egressd's ip rules, routes and nexthops",
			fmt.Sprintf("removed egressd's ip rules, routes and nexthops (protocol %d)", o.routing.Protocol),
			func() error { return routing.Cleanup(o.routing) }},
		{"remove the tunnel device " + dataplane.TunnelDevice, "removed the tunnel device " + dataplane.TunnelDevice, tunnel.Cleanup},
		{"put back the reverse path filters the agent loosened", "put back the reverse path filters the agent loosened (" + rpState + ")",
			func() error { return rpfilter.Restore(rpState) }},
		// The DaemonSet's hostPath of the CNI socket (DirectoryOrCreate: the kubelet makes it).
		{"remove " + filepath.Dir(o.cniSocket), "removed " + filepath.Dir(o.cniSocket) + " (the agent's socket directory)", func() error {
			return removeSocketDir(o.cniSocket)
		}},
		{"remove " + o.pinRoot, "removed " + o.pinRoot, func() error {
			var pathErr *fs.PathError
			switch err := os.Remove(o.pinRoot); {
			case errors.Is(err, os.ErrNotExist):
				return nil
			case errors.As(err, &pathErr):
				return pathErr.Err // the step names the path already
			default:
				return err
			}
		}},
	}
	if o.cniConfDir != "" {
		// First, so that no new pod waits for an agent that is gone.
		steps = slices.Insert(steps, 0, step{"remove egressd-cni from " + o.cniConfDir + " and " + o.cniBinDir,
			"removed egressd-cni from the CNI configuration lists in " + o.cniConfDir + " and its binaries from " + o.cniBinDir,
			func() error { return cniinstall.Uninstall(o.cniBinDir, o.cniConfDir) }})
	}
	return runSteps(steps)
}

// runSteps runs every step, also after one failed (each removes something of its own: a
// table left behind is no reason to leave the routes), and returns every failure.
func runSteps(steps []step) (cleanupReport, error) {
	r := cleanupReport{Removed: []string{}}
	var errs []error
	for _, s := range steps {
		if err := s.remove(); err != nil {
			err = fmt.Errorf("%s: %w", s.do, err)
			r.Failed = append(r.Failed, err.Error())
			errs = append(errs, err)
			continue
		}
		r.Removed = append(r.Removed, s.done)
	}
	return r, errors.Join(errs...)
}

// removeSocketDir removes the agent's CNI socket (left by an agent that was killed), the init
// container's status file and the agent's dnsName addresses next to it, and their directory,
// unless something else lives there.
func removeSocketDir(socket string) error {
	dir := filepath.Dir(socket)
	for _, f := range []string{socket, filepath.Join(dir, filepath.Base(cniinstall.DefaultStatusFile)), filepath.Join(dir, dnsnames.StateFile), filepath.Join(dir, dnsnames.LearnedFile)} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	err := os.Remove(filepath.Dir(socket))
	if err == nil || errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
		return nil
	}
	return err
}
