package dnsnames

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

// learning runs f with a resolver that resolves nothing itself (no servers), in a bubble.
func learning(t *testing.T, f func(r *Resolver)) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		f(New(ctx, nil, 0, "", slog.New(slog.NewTextHandler(io.Discard, nil))))
	})
}

// Answers are kept for wanted names only, case- and dot-insensitively, and a wildcard matches
// exactly one more label.
func TestLearnWantedNamesAndWildcards(t *testing.T) {
	learning(t, func(r *Resolver) {
		r.Want([]string{"api.example.com", "*.cdn.example.com"})
		for _, c := range []struct {
			name  string
			fresh bool
		}{
			{"API.Example.com.", true},
			{"other.example.com", false},
			{"a.cdn.example.com", true},
			{"cdn.example.com", false},        // the domain itself
			{"b.a.cdn.example.com", false},    // two labels deeper
			{"a.cdn.example.com.evil", false}, // not under it
		} {
			if _, fresh := r.Learn("ns", c.name, addrs("192.0.2.1"), time.Minute); fresh != c.fresh {
				t.Errorf("Learn(%s): fresh=%v, want %v", c.name, fresh, c.fresh)
			}
		}
		r.Learn("ns", "b.cdn.example.com", addrs("2001:db8::2", "192.0.2.2"), time.Minute)
		if got := r.Lookup("api.example.com"); !slices.Equal(got, addrs("192.0.2.1")) {
			t.Errorf("Lookup(api.example.com) = %v", got)
		}
		if got := r.Lookup("*.cdn.example.com"); !slices.Equal(got, addrs("192.0.2.1", "192.0.2.2", "2001:db8::2")) {
			t.Errorf("Lookup(*.cdn.example.com) = %v, want the answers of a. and b.", got)
		}
		if r.Wants("c.cdn.example.com") != true || r.Wants("example.com") != false {
			t.Error("Wants does not follow the wildcard")
		}
		// A name no longer wanted takes its answers with it.
		r.Want([]string{"api.example.com"})
		if got := r.Lookup("*.cdn.example.com"); len(got) != 0 {
			t.Errorf("after the wildcard went: %v", got)
		}
	})
}

// A learned address lasts its TTL plus the grace (at least the minimum TTL), a later answer
// extends it, and its expiry asks for a sync.
func TestLearnedAddressesExpire(t *testing.T) {
	learning(t, func(r *Resolver) {
		r.Want([]string{"api.example.com"})
		gen, fresh := r.Learn("ns", "api.example.com", addrs("192.0.2.1"), 0)
		if !fresh || gen != r.Generation() {
			t.Fatalf("Learn: gen %d fresh %v", gen, fresh)
		}
		<-r.Changed()
		if _, fresh := r.Learn("ns", "api.example.com", addrs("192.0.2.1"), 0); fresh {
			t.Error("the same address again is not fresh")
		}
		time.Sleep(learnMinTTL + learnGrace - time.Second)
		if len(r.Lookup("api.example.com")) != 1 {
			t.Fatal("expired before its minimum TTL and grace")
		}
		r.Learn("ns", "api.example.com", addrs("192.0.2.1"), 30*time.Second) // asked again: extended
		time.Sleep(30*time.Second + learnGrace - time.Second)
		if len(r.Lookup("api.example.com")) != 1 {
			t.Fatal("a later answer did not extend it")
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if got := r.Lookup("api.example.com"); len(got) != 0 || r.Stats().Learned != 0 {
			t.Fatalf("after its TTL and grace: %v (%d counted)", got, r.Stats().Learned)
		}
		select {
		case <-r.Changed():
		default:
			t.Error("the expiry asked for no sync")
		}
		if r.Generation() == gen {
			t.Error("the expiry did not change the generation")
		}
	})
}

// WaitApplied returns once a sync that compiled from the generation is applied.
func TestWaitApplied(t *testing.T) {
	learning(t, func(r *Resolver) {
		r.Want([]string{"api.example.com"})
		gen, _ := r.Learn("ns", "api.example.com", addrs("192.0.2.1"), time.Minute)
		done := make(chan error, 1)
		go func() { done <- r.WaitApplied(context.Background(), gen) }()
		r.Applied(gen - 1)
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("returned for an older generation")
		default:
		}
		r.Applied(gen)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := r.WaitApplied(ctx, gen+1); err == nil {
			t.Error("WaitApplied for a generation never applied returned nil")
		}
	})
}

// Beyond MaxAddresses per name, new addresses are refused and counted.
func TestLearnCaps(t *testing.T) {
	learning(t, func(r *Resolver) {
		r.Want([]string{"api.example.com"})
		var many []netip.Addr
		for i := range MaxAddresses + 10 {
			many = append(many, netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}))
		}
		r.Learn("ns", "api.example.com", many, time.Minute)
		if got := len(r.Lookup("api.example.com")); got != MaxAddresses {
			t.Errorf("kept %d, want %d", got, MaxAddresses)
		}
		if s := r.Stats(); s.Refused != 10 || s.Learned != MaxAddresses {
			t.Errorf("stats %+v, want 10 refused, %d learned", s, MaxAddresses)
		}
	})
}

// What was learned outlives a restart of the agent, with its expiry: the new resolver answers
// with it from the start (before it is told which names are wanted), and not past its TTL.
func TestLearnedKeptAcrossRestart(t *testing.T) {
	state := filepath.Join(t.TempDir(), StateFile)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		r := New(ctx, nil, 0, state, log)
		r.Want([]string{"*.cdn.example.com"})
		r.Learn("ns", "a.cdn.example.com", addrs("192.0.2.1"), 10*time.Second)
		r.Learn("ns", "b.cdn.example.com", addrs("192.0.2.2"), time.Hour)
		cancel() // the agent stops: what is not written yet is
		synctest.Wait()

		time.Sleep(30 * time.Second) // a's answer expired meanwhile
		ctx, cancel = context.WithCancel(context.Background())
		defer cancel()
		r = New(ctx, nil, 0, state, log)
		if got := r.Lookup("*.cdn.example.com"); !slices.Equal(got, addrs("192.0.2.2")) {
			t.Errorf("after the restart: %v, want b's unexpired address", got)
		}
		r.Want([]string{"*.cdn.example.com"})
		time.Sleep(time.Hour)
		synctest.Wait()
		if got := r.Lookup("*.cdn.example.com"); len(got) != 0 {
			t.Errorf("past its TTL: %v", got)
		}
	})
}

// A wildcard keeps at most MaxWildcardAddresses over all the names it matched.
func TestLearnWildcardCap(t *testing.T) {
	learning(t, func(r *Resolver) {
		r.Want([]string{"*.cdn.example.com"})
		for i := range MaxWildcardAddresses/10 + 5 {
			var batch []netip.Addr
			for j := range 10 {
				batch = append(batch, netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), byte(j)}))
			}
			r.Learn("ns", fmt.Sprintf("n%d.cdn.example.com", i), batch, time.Minute)
		}
		if got := len(r.Lookup("*.cdn.example.com")); got != MaxWildcardAddresses {
			t.Errorf("kept %d under the wildcard, want %d", got, MaxWildcardAddresses)
		}
		if s := r.Stats(); s.Refused != 50-MaxWildcardAddresses%10 {
			t.Errorf("refused %d", s.Refused)
		}
	})
}

// The answers to one namespace's pods keep at most their cap (DefaultNamespaceAddresses): beyond, that
// namespace is Capped and learns nothing new, while another namespace's answers still teach;
// once its addresses expire it learns again. An address another namespace brought first is
// not counted against it.
func TestLearnNamespaceCap(t *testing.T) {
	learning(t, func(r *Resolver) {
		names := DefaultNamespaceAddresses/MaxAddresses + 1
		var want []string
		for i := range names + 1 {
			want = append(want, fmt.Sprintf("n%d.example.com", i))
		}
		r.Want(want)
		batch := func(name int) []netip.Addr {
			var out []netip.Addr
			for j := range MaxAddresses {
				out = append(out, netip.AddrFrom4([4]byte{10, byte(name), byte(j >> 8), byte(j)}))
			}
			return out
		}
		r.Learn("b", "n0.example.com", batch(0)[:1], time.Hour) // b's, before a asks
		for i := range names {
			r.Learn("a", want[i], batch(i), time.Minute)
		}
		if s := r.Stats(); s.Learned != DefaultNamespaceAddresses+1 || s.Refused != MaxAddresses-1 || s.Capped != 1 {
			t.Errorf("stats %+v, want %d learned (the cap and b's), %d refused, 1 namespace capped", s, DefaultNamespaceAddresses+1, MaxAddresses-1)
		}
		if got := r.Capped(); got["a"] == "" || len(got) != 1 {
			t.Errorf("capped %v, want a", got)
		}
		if _, fresh := r.Learn("a", want[names], batch(names)[:1], time.Minute); fresh {
			t.Error("a capped namespace learned")
		}
		if _, fresh := r.Learn("b", want[names], batch(names)[:1], time.Hour); !fresh {
			t.Error("another namespace did not learn")
		}
		time.Sleep(2 * time.Minute) // a's answers expire, b's (an hour) stay
		synctest.Wait()
		if got := r.Capped(); len(got) != 0 {
			t.Errorf("capped %v after its addresses expired", got)
		}
		if _, fresh := r.Learn("a", want[names], batch(names)[1:2], time.Minute); !fresh {
			t.Error("the namespace did not learn again after its addresses expired")
		}
		if s := r.Stats(); s.Learned != 3 {
			t.Errorf("%d learned, want b's two and a's new one", s.Learned)
		}
	})
}
