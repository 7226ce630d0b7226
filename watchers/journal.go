package watchers

import (
	"reflect"
	"slices"
	"sync"
)

// journalSize bounds the keys a journal keeps: a consumer that falls further behind (or a
// burst of more changes between two of its reads) looks at every object instead.
const journalSize = 4096

// journal is the keys of the objects of one kind that changed, in order: a consumer that
// keeps a result per object brings it up to date from the keys changed since its last read
// instead of walking all of them (10,000 EgressFirewalls, one edited).
type journal struct {
	mu   sync.Mutex
	seq  uint64   // changes recorded so far
	keys []string // the last of them, keys[len(keys)-1] being change seq; "" is a change of unknown key
}

func (j *journal) add(key string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.keys) == journalSize {
		j.keys = append(j.keys[:0], j.keys[journalSize/2:]...)
	}
	j.keys = append(j.keys, key)
	j.seq++
}

// since is the distinct keys changed after change cursor, the cursor to read from next time,
// and whether the keys are all of those changes.
func (j *journal) since(cursor uint64) (keys []string, next uint64, ok bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	first := j.seq - uint64(len(j.keys)) // the change keys[0] follows
	if cursor < first || cursor > j.seq {
		return nil, j.seq, false
	}
	if cursor == j.seq {
		return nil, j.seq, true // the usual answer: nothing since
	}
	seen := map[string]bool{}
	for _, k := range j.keys[cursor-first:] {
		if k == "" {
			return nil, j.seq, false
		}
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	return keys, j.seq, true
}

// Journaled makes g keep the keys of the changed objects of kinds (pointers to their Go
// types), for ChangedSince. It returns g.
func (g *Generations) Journaled(kinds ...any) *Generations {
	if g.journals == nil {
		g.journals = map[reflect.Type]*journal{}
	}
	for _, k := range kinds {
		g.journals[reflect.TypeOf(k)] = &journal{}
	}
	return g
}

// Changed records a change of the object of kind whose cache key ("namespace/name") is key
// ("": not known).
func (g *Generations) Changed(kind any, key string) {
	t := reflect.TypeOf(kind)
	if j := g.journals[t]; j != nil {
		j.add(key) // before the count: whoever sees the count moved finds the key
	}
	g.counts[t].Add(1)
}

// ChangedSince returns the keys of the objects of kind that changed after cursor, and the
// cursor to pass next time. ok is false when they are not known: g is nil, kind is not
// journaled, a change had no key, or more changed than the journal keeps; the caller then looks
// at every object (read the cursor before the caches, as Of).
func (g *Generations) ChangedSince(kind any, cursor uint64) (keys []string, next uint64, ok bool) {
	if g == nil {
		return nil, 0, false
	}
	j := g.journals[reflect.TypeOf(kind)]
	if j == nil {
		return nil, 0, false
	}
	return j.since(cursor)
}

// Follower follows the changes of one kind for a consumer that keeps a result per object: the
// journal's keys since its last look, with the objects an overlay lists now or listed then (an
// overlay's changes are in no journal: an object it stops listing is seen once more).
type Follower struct {
	cursor   uint64
	overlaid []string
}

// Changed returns the keys of the objects of kind to look at again since the last call, and
// false when they are not known (look at every object). Call it before reading the caches.
func (f *Follower) Changed(g *Generations, kind any) (keys []string, ok bool) {
	keys, f.cursor, ok = g.ChangedSince(kind, f.cursor)
	overlaid := g.Overlaid(kind)
	if ok {
		keys = slices.Concat(keys, overlaid, f.overlaid)
	}
	f.overlaid = overlaid
	return keys, ok
}
