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
)

// maxStateSize bounds what is read of the state file: the agent writes it, and a file this
// large is not one it wrote (the addresses a node keeps are far fewer).
const maxStateSize = 64 << 20

// load reads the addresses an earlier agent kept in path, by name (none when there is no
// file). Names and addresses beyond the resolver's caps are left out.
func load(path string) (map[string][]netip.Addr, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var kept map[string][]netip.Addr
	if err := json.NewDecoder(io.LimitReader(f, maxStateSize)).Decode(&kept); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := map[string][]netip.Addr{}
	for _, name := range slices.Sorted(maps.Keys(kept)) {
		if len(out) == MaxNames {
			break
		}
		addrs := slices.DeleteFunc(kept[name], func(a netip.Addr) bool { return !a.IsValid() })
		if len(addrs) > 0 {
			out[Canonical(name)] = addrs[:min(len(addrs), MaxAddresses)]
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

// save writes the wanted names' addresses, atomically.
func (r *Resolver) save() error {
	r.mu.Lock()
	kept := make(map[string][]netip.Addr, len(r.entries))
	for name, e := range r.entries {
		if len(e.addrs) > 0 {
			kept[name] = e.addrs
		}
	}
	r.mu.Unlock()
	b, err := json.Marshal(kept)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(r.state), 0o755); err != nil {
		return err
	}
	// A temporary file of its own: another agent sharing the directory (the lab's nodes) writes
	// its file at the same time.
	tmp, err := os.CreateTemp(filepath.Dir(r.state), filepath.Base(r.state)+".*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if err = errors.Join(err, tmp.Close()); err == nil {
		err = os.Rename(tmp.Name(), r.state)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}
