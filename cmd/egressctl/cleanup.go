package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/egressd/egressd/dataplane/addresses"
	"github.com/egressd/egressd/dataplane/classifier"
	"github.com/egressd/egressd/dataplane/nft"
	"github.com/egressd/egressd/dataplane/routing"
	"github.com/egressd/egressd/dataplane/tcx"
)

// cleanupReport lists what cleanup removed, in order; a cleanup that failed lists what it
// removed before the failure.
type cleanupReport struct {
	Removed []string `json:"removed"`
}

func (r cleanupReport) writeText(w io.Writer) error {
	for _, s := range r.Removed {
		if _, err := fmt.Fprintln(w, s); err != nil {
			return err
		}
	}
	return nil
}

// cleanup removes, per kernel facility, what egressd owns, then the pin root itself.
func cleanup(o options) (cleanupReport, error) {
	r := cleanupReport{Removed: []string{}}
	steps := []struct {
		done   string
		remove func() error
	}{
		{"detached classifier links pinned under " + tcx.LinksDir(o.pinRoot), func() error { return tcx.Cleanup(o.pinRoot) }},
		{"removed classifier maps under " + o.pinRoot, func() error { return classifier.Cleanup(o.pinRoot) }},
		{"removed nftables table inet " + nft.TableName, nft.Cleanup},
		{fmt.Sprintf("removed egress addresses stamped with protocol %d", addresses.DefaultProtocol),
			func() error { return addresses.Cleanup(addresses.DefaultProtocol) }},
		{fmt.Sprintf("removed egressd's ip rules, routes and nexthops (protocol %d)", o.routing.Protocol),
			func() error { return routing.Cleanup(o.routing) }},
		{"removed " + o.pinRoot, func() error {
			if err := os.Remove(o.pinRoot); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			return nil
		}},
	}
	for _, s := range steps {
		if err := s.remove(); err != nil {
			return r, fmt.Errorf("not %s: %w", s.done, err)
		}
		r.Removed = append(r.Removed, s.done)
	}
	return r, nil
}
