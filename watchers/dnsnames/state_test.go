package dnsnames

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/egressd/egressd/test/poll"
)

// kept waits until the state file holds want for name (nothing: the name is not in it).
func kept(t *testing.T, path, name string, want ...string) {
	t.Helper()
	poll.Eventually(t, "the state file", 5*time.Second, func() error {
		got, err := load(path)
		if err != nil {
			return err
		}
		var addrs []string
		for _, a := range got[name] {
			addrs = append(addrs, a.String())
		}
		if !slices.Equal(addrs, want) {
			return fmt.Errorf("keeps %v for %s, want %v", addrs, name, want)
		}
		return nil
	})
}

// An agent restarted while the DNS fails answers a name with the addresses the previous one
// kept, from the first lookup (before the name is wanted: the first compile) until the name's
// first fresh answer; the file follows the answers, and forgets names no longer wanted.
func TestResolverKeepsAddressesAcrossRestart(t *testing.T) {
	s := &server{}
	s.set(1, false, "203.0.113.20", "2001:db8::20")
	addr := serve(t, s)
	state := filepath.Join(t.TempDir(), "run", StateFile)

	ctx, stop := context.WithCancel(t.Context())
	r := startIn(t, ctx, []string{addr}, state)
	r.Want([]string{"www.example.com", "gone.example.com"})
	waitAddrs(t, r, "www.example.com", "203.0.113.20", "2001:db8::20")
	kept(t, state, "www.example.com", "203.0.113.20", "2001:db8::20")
	stop() // the agent stops, keeping what it had
	<-r.Stopped()

	s.set(1, true) // the DNS fails from now on
	r = startIn(t, t.Context(), []string{addr}, state)
	if got := r.Lookup("WWW.example.com."); !slices.Equal(strs(got), []string{"203.0.113.20", "2001:db8::20"}) {
		t.Errorf("the restarted resolver's first lookup: %v, want the kept addresses", got)
	}
	before := s.count()
	r.Want([]string{"www.example.com"})
	poll.Eventually(t, "queries that fail", 5*time.Second, func() error {
		if n := s.count() - before; n < 4 {
			return fmt.Errorf("%d queries since the restart", n)
		}
		return nil
	})
	if got := r.Lookup("www.example.com"); !slices.Equal(strs(got), []string{"203.0.113.20", "2001:db8::20"}) {
		t.Errorf("while the DNS fails after the restart: %v, want the kept addresses", got)
	}
	kept(t, state, "gone.example.com") // no longer wanted

	s.set(1, false, "203.0.113.21")
	waitAddrs(t, r, "www.example.com", "203.0.113.21")
	kept(t, state, "www.example.com", "203.0.113.21")
}

// A state file that cannot be read leaves the resolver empty, as without one.
func TestResolverIgnoresBrokenState(t *testing.T) {
	state := filepath.Join(t.TempDir(), StateFile)
	if err := os.WriteFile(state, []byte(`{"www.example.com": ["not an address"]`), 0o644); err != nil {
		t.Fatal(err)
	}
	r := startIn(t, t.Context(), nil, state)
	if got := r.Lookup("www.example.com"); len(got) != 0 {
		t.Errorf("a broken state file answers %v", got)
	}
}

func strs[T fmt.Stringer](in []T) []string {
	var out []string
	for _, v := range in {
		out = append(out, v.String())
	}
	return out
}
