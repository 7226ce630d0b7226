package watchers

// Memo keeps a value computed from the caches under the generation of the kinds of objects
// it read (Generations.Of), so that a sync for any other change need not compute it again.
type Memo[T any] struct {
	generation uint64
	valid      bool
	value      T
}

// Get returns the value kept while no object of kinds changed since it was computed, else
// computes it. The generation is read before compute reads the caches, and a failure is not
// kept; with g nil (a snapshot built by hand) nothing is.
func (m *Memo[T]) Get(g *Generations, kinds []any, compute func() (T, error)) (T, error) {
	gen, known := g.Of(kinds...)
	if known && m.valid && m.generation == gen {
		return m.value, nil
	}
	v, err := compute()
	*m = Memo[T]{generation: gen, valid: known && err == nil, value: v}
	return v, err
}

// Forget makes the next Get compute the value again: it depends on something besides the
// caches that changed.
func (m *Memo[T]) Forget() { m.valid = false }
