package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/addresses"
	"github.com/egressd/egressd/dataplane/classifier"
	"github.com/egressd/egressd/dataplane/nft"
	"github.com/egressd/egressd/dataplane/routing"
	"github.com/egressd/egressd/dataplane/tcx"
	"github.com/egressd/egressd/dataplane/tunnel"
)

// cleanup removes, per kernel facility, what egressd owns, then the pin root itself.
func cleanup(o options, out io.Writer) error {
	if err := tcx.Cleanup(o.pinRoot); err != nil {
		return fmt.Errorf("detach classifier links under %s: %w", o.pinRoot, err)
	}
	fmt.Fprintf(out, "detached classifier links pinned under %s\n", tcx.LinksDir(o.pinRoot))
	if err := classifier.Cleanup(o.pinRoot); err != nil {
		return fmt.Errorf("remove classifier maps under %s: %w", o.pinRoot, err)
	}
	fmt.Fprintf(out, "removed classifier maps under %s\n", o.pinRoot)
	if err := nft.Cleanup(); err != nil {
		return fmt.Errorf("remove nftables table inet %s: %w", nft.TableName, err)
	}
	fmt.Fprintf(out, "removed nftables table inet %s\n", nft.TableName)
	if err := addresses.Cleanup(addresses.DefaultProtocol); err != nil {
		return fmt.Errorf("remove egress addresses (protocol %d): %w", addresses.DefaultProtocol, err)
	}
	fmt.Fprintf(out, "removed egress addresses stamped with protocol %d\n", addresses.DefaultProtocol)
	if err := routing.Cleanup(o.routing); err != nil {
		return fmt.Errorf("remove egressd's ip rules, routes and nexthops: %w", err)
	}
	fmt.Fprintf(out, "removed egressd's ip rules, routes and nexthops (protocol %d)\n", o.routing.Protocol)
	if err := tunnel.Cleanup(); err != nil {
		return fmt.Errorf("remove the tunnel device %s: %w", dataplane.TunnelDevice, err)
	}
	fmt.Fprintf(out, "removed the tunnel device %s\n", dataplane.TunnelDevice)
	if err := os.Remove(o.pinRoot); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", o.pinRoot, err)
	}
	fmt.Fprintf(out, "removed %s\n", o.pinRoot)
	return nil
}
