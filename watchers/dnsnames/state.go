package dnsnames

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/egressd/egressd/internal/dnsname"
)

// maxStateSize bounds what is read of the state file: the agent writes it, and a file this
// large is not one it wrote (the addresses a node keeps are far fewer).
const maxStateSize = 64 << 20

// readState decodes the JSON file path into v (left as it is when there is no file), reading
// at most maxStateSize of it.
func readState(path string, v any) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if err := json.NewDecoder(io.LimitReader(f, maxStateSize)).Decode(v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// load reads the addresses an earlier agent kept in path, by name (none when there is no
// file). Names and addresses beyond the resolver's caps are left out.
func load(path string) (map[string][]netip.Addr, error) {
	var kept map[string][]netip.Addr
	if err := readState(path, &kept); err != nil || kept == nil {
		return nil, err
	}
	out := map[string][]netip.Addr{}
	for _, name := range slices.Sorted(maps.Keys(kept)) {
		if len(out) == MaxNames {
			break
		}
		addrs := slices.DeleteFunc(kept[name], func(a netip.Addr) bool { return !a.IsValid() })
		if len(addrs) > 0 {
			out[dnsname.Canonical(name)] = addrs[:min(len(addrs), MaxAddresses)]
		}
	}
	return out, nil
}

// markDirty asks for the state file to be written. r.mu held.
func (r *Resolver) markDirty() {
	if r.state == "" {
		return
	}
	select {
	case r.dirty <- struct{}{}:
	default:
	}
}

// saving writes the state file after changes, at most every saveEvery (a name whose answers
// rotate does not rewrite it at every refresh), and a change not written yet when ctx ends.
func (r *Resolver) saving() {
	defer close(r.stopped)
	for {
		select {
		case <-r.ctx.Done():
			select {
			case <-r.dirty:
				r.saveLogged()
			default:
			}
			return
		case <-r.dirty:
		}
		r.saveLogged()
		select {
		case <-r.ctx.Done():
		case <-time.After(r.saveEvery):
		}
	}
}

func (r *Resolver) saveLogged() {
	if err := r.save(); err != nil {
		r.log.Error("dnsName addresses not kept for a restart of the agent", "file", r.state, "err", err)
	}
}

// save writes the wanted names' addresses, and the learned ones with their expiry (next to
// it, learnedFile), atomically.
func (r *Resolver) save() error {
	r.mu.Lock()
	kept := make(map[string][]netip.Addr, len(r.entries))
	for name, e := range r.entries {
		if len(e.addrs) > 0 {
			kept[name] = e.addrs
		}
	}
	learned := make(map[string]map[netip.Addr]time.Time, len(r.learned))
	for name, m := range r.learned {
		learned[name] = maps.Clone(m)
	}
	r.mu.Unlock()
	b, err := json.Marshal(kept)
	if err != nil {
		return err
	}
	lb, err := json.Marshal(learned)
	if err != nil {
		return err
	}
	return errors.Join(writeAtomic(r.state, b), writeAtomic(learnedFile(r.state), lb))
}

// LearnedFile is the name of the file, next to the state file, that keeps the learned
// addresses with their expiry across a restart of the agent.
const LearnedFile = "dnsnames-learned.json"

func learnedFile(state string) string { return filepath.Join(filepath.Dir(state), LearnedFile) }

// loadLearned reads the learned addresses an earlier agent kept, those not expired yet.
func loadLearned(path string) (map[string]map[netip.Addr]time.Time, error) {
	var kept map[string]map[netip.Addr]time.Time
	if err := readState(path, &kept); err != nil || kept == nil {
		return nil, err
	}
	now := time.Now()
	out := map[string]map[netip.Addr]time.Time{}
	for _, name := range slices.Sorted(maps.Keys(kept)) {
		if len(out) == MaxLearnedNames {
			break
		}
		m := map[netip.Addr]time.Time{}
		for a, exp := range kept[name] {
			if a.IsValid() && exp.After(now) && len(m) < MaxAddresses {
				if limit := now.Add(learnMaxTTL + learnGrace); exp.After(limit) {
					exp = limit // a clock gone back, or a file not ours
				}
				m[a] = exp
			}
		}
		if len(m) > 0 {
			out[dnsname.Canonical(name)] = m
		}
	}
	return out, nil
}

// writeAtomic replaces path with b.
func writeAtomic(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	// A temporary file of its own: another agent sharing the directory (the lab's nodes) writes
	// its file at the same time.
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if err = errors.Join(err, tmp.Close()); err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}

// Kept is what an agent keeps in its state directory dir (egressctl dns): each name's last
// resolved addresses, and the addresses learned from answers to pods with their expiry (those
// not expired yet).
func Kept(dir string) (resolved map[string][]netip.Addr, learned map[string]map[netip.Addr]time.Time, err error) {
	resolved, err = load(filepath.Join(dir, StateFile))
	if err != nil {
		return nil, nil, err
	}
	learned, err = loadLearned(filepath.Join(dir, LearnedFile))
	return resolved, learned, err
}
