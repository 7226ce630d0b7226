// Package verdicts keeps what the API server said of a bearer token (a TokenReview's outcome)
// for a while, so that a burst of calls with one token costs one review, bounded so that a
// caller sending a new token each time makes the cache start over rather than grow.
package verdicts

import (
	"crypto/sha256"
	"sync"
	"time"
)

// max bounds the verdicts kept.
const max = 1024

// DefaultTTL is how long a verdict is kept unless told otherwise.
const DefaultTTL = 30 * time.Second

// Cache holds verdicts of type V by the token (and whatever else decided them) they are of.
type Cache[V any] struct {
	// TTL is how long a verdict is kept (DefaultTTL when 0).
	TTL time.Duration

	mu sync.Mutex
	m  map[[32]byte]entry[V]
}

type entry[V any] struct {
	v       V
	expires time.Time
}

// Key is the cache key of the parts (a token, a path): a digest, so that no token is kept.
func Key(parts ...string) [32]byte {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	var k [32]byte
	copy(k[:], h.Sum(nil))
	return k
}

// Get returns the verdict of key if it is still valid at now.
func (c *Cache[V]) Get(key [32]byte, now time.Time) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok || !now.Before(e.expires) {
		var zero V
		return zero, false
	}
	return e.v, true
}

// Put keeps v for key from now on.
func (c *Cache[V]) Put(key [32]byte, v V, now time.Time) {
	ttl := c.TTL
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= max {
		c.m = map[[32]byte]entry[V]{}
	}
	c.m[key] = entry[V]{v: v, expires: now.Add(ttl)}
}
