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
// previous values live in a file (in /run: a reboot resets both), so that a restarted agent, or
// `egressctl cleanup`, still knows them.
type Loosener struct {
	path string
	// prev are the values the interfaces had before egressd loosened them, by name.
	prev map[string]int
}

// OpenLoosener reads what an earlier agent loosened from path.
func OpenLoosener(path string) (*Loosener, error) {
	l := &Loosener{path: path, prev: map[string]int{}}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return l, nil
	case err != nil:
		return nil, err
	}
	if err := json.Unmarshal(b, &l.prev); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return l, nil
}

// Loosened are the interfaces egressd has loosened, by name.
func (l *Loosener) Loosened() []string { return slices.Sorted(maps.Keys(l.prev)) }

// Sync loosens each interface of want (name by index) whose filter is strict, and puts back
// the value of those it loosened before that are no longer wanted (unless someone changed them
// since). It returns the interfaces it loosened and restored now.
func (l *Loosener) Sync(want map[int]string) (loosened, restored []string, err error) {
	var errs []error
	wanted := map[string]bool{}
	for index, name := range want {
		wanted[name] = true
		if !Strict(name) {
			continue
		}
		prev := Get(name)
		if err := Set(index, Loose); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		if _, ok := l.prev[name]; !ok {
			l.prev[name] = prev
		}
		loosened = append(loosened, name)
	}
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
	slices.Sort(loosened)
	if len(loosened)+len(restored) > 0 {
		errs = append(errs, l.save())
	}
	return loosened, restored, errors.Join(errs...)
}

// Restore puts back every value the agent (or an earlier one) replaced, and removes the file
// (`egressctl cleanup`).
func Restore(path string) error {
	l, err := OpenLoosener(path)
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range l.Loosened() {
		errs = append(errs, l.restore(name))
	}
	if err := errors.Join(errs...); err != nil {
		return errors.Join(err, l.save())
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// restore puts back name's previous value if it still has egressd's, and forgets it.
func (l *Loosener) restore(name string) error {
	prev := l.prev[name]
	ifi, err := net.InterfaceByName(name)
	if err == nil && Get(name) == Loose {
		if err := Set(ifi.Index, prev); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	delete(l.prev, name) // gone, or changed by someone else since: theirs now
	return nil
}

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
