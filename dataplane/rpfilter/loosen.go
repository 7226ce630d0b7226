package rpfilter

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
)

// StateFile is the name of the file, in the agent's state directory (next to its CNI socket),
// that remembers the values Loosen replaced.
const StateFile = "rp_filter.json"

// Loosener loosens the reverse path filter of the interfaces egressd's routes bring replies in
// through, and puts the previous value back once they no longer do, or at cleanup. The
// previous values live in a file (in /run: a reboot resets both), written before an interface
// is changed, so that a restarted agent, or `egressctl cleanup`, always knows them.
type Loosener struct {
	path string
	// prev are the values the interfaces had before egressd loosened them, by name.
	prev map[string]int
}

// OpenLoosener reads what an earlier agent loosened from path. A file it cannot read is moved
// aside (path + ".bad") and reported: the loosener starts empty, and what the file named stays
// loose.
func OpenLoosener(path string) (*Loosener, error) {
	l := &Loosener{path: path, prev: map[string]int{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return l, nil
	}
	if err == nil {
		err = json.Unmarshal(b, &l.prev)
	}
	if err != nil {
		l.prev = map[string]int{}
		return l, errors.Join(fmt.Errorf("%s: %w: moved to %s.bad, its interfaces stay loose", path, err, path), os.Rename(path, path+".bad"))
	}
	if l.prev == nil { // "null"
		l.prev = map[string]int{}
	}
	return l, nil
}

// Loosened are the interfaces egressd has loosened, by name.
func (l *Loosener) Loosened() []string { return slices.Sorted(maps.Keys(l.prev)) }

// Sync loosens each interface of want (name by index) whose filter is strict and, when want is
// complete, puts back the value of those it loosened before that are no longer wanted (unless
// someone changed them since). It returns the interfaces it loosened and restored now. An
// interface is changed only once its previous value is in the file.
func (l *Loosener) Sync(want map[int]string, complete bool) (loosened, restored []string, err error) {
	var errs []error
	wanted := map[string]bool{}
	strict := map[int]string{}
	for index, name := range want {
		wanted[name] = true
		if Strict(name) {
			strict[index] = name
			if _, ok := l.prev[name]; !ok {
				l.prev[name] = Get(name)
			}
		}
	}
	if len(strict) > 0 {
		if err := l.save(); err != nil {
			return nil, nil, fmt.Errorf("remember the reverse path filters before loosening %v: %w", slices.Sorted(maps.Values(strict)), err)
		}
	}
	for index, name := range strict {
		if err := Set(index, Loose); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		loosened = append(loosened, name)
	}
	if complete {
		for _, name := range l.Loosened() {
			if wanted[name] {
				continue
			}
			if err := l.restore(name); err != nil {
				errs = append(errs, err)
				continue
			}
			restored = append(restored, name)
		}
		if len(restored) > 0 {
			errs = append(errs, l.save())
		}
	}
	slices.Sort(loosened)
	return loosened, restored, errors.Join(errs...)
}

// Restore puts back every value the agent (or an earlier one) replaced, and removes the file
// (`egressctl cleanup`, and an agent told not to loosen).
func Restore(path string) error {
	l, err := OpenLoosener(path)
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range l.Loosened() {
		errs = append(errs, l.restore(name))
	}
	return errors.Join(append(errs, l.save())...)
}

// restore puts back name's previous value if it still has egressd's, and forgets it (an
// interface gone, or changed by someone else since to another value: theirs now).
func (l *Loosener) restore(name string) error {
	prev := l.prev[name]
	ifi, err := net.InterfaceByName(name)
	if err == nil && Get(name) == Loose {
		if err := Set(ifi.Index, prev); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	delete(l.prev, name)
	return nil
}

// save writes the file (removes it when nothing is loosened), atomically.
func (l *Loosener) save() error {
	if len(l.prev) == 0 {
		if err := os.Remove(l.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	b, err := json.Marshal(l.prev)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(l.path), 0o755); err != nil {
		return err
	}
	tmp := l.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, l.path)
}
