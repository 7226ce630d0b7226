package verdicts

import (
	"fmt"
	"testing"
	"time"
)

// TestVerdictLastsItsTTL: a verdict is given back until its TTL has passed, not after; a
// token never put is unknown.
func TestVerdictLastsItsTTL(t *testing.T) {
	now := time.Unix(1000, 0)
	c := &Cache[string]{TTL: 10 * time.Second}
	k := Key("token", "/announce")
	c.Put(k, "node-1", now)
	if v, ok := c.Get(k, now.Add(9999*time.Millisecond)); !ok || v != "node-1" {
		t.Errorf("just before the TTL: %q, %v; want node-1", v, ok)
	}
	if _, ok := c.Get(k, now.Add(10*time.Second)); ok {
		t.Error("at the TTL: still given")
	}
	if _, ok := c.Get(Key("other"), now); ok {
		t.Error("a token never put is known")
	}
	d := &Cache[string]{}
	d.Put(k, "node-1", now)
	if _, ok := d.Get(k, now.Add(DefaultTTL)); ok {
		t.Error("without a TTL, a verdict outlives DefaultTTL")
	}
}

// TestCacheStartsOverPastItsBound: a caller sending a new token each time makes the cache start
// over instead of growing past max entries.
func TestCacheStartsOverPastItsBound(t *testing.T) {
	now := time.Unix(1000, 0)
	c := &Cache[int]{}
	first := Key("token-0")
	for i := range max + 1 {
		c.Put(Key(fmt.Sprintf("token-%d", i)), i, now)
		if len(c.m) > max {
			t.Fatalf("%d verdicts kept, bound %d", len(c.m), max)
		}
	}
	if _, ok := c.Get(first, now); ok {
		t.Error("the oldest verdict survived the cache starting over")
	}
	if v, ok := c.Get(Key(fmt.Sprintf("token-%d", max)), now); !ok || v != max {
		t.Error("the newest verdict is lost")
	}
}

// TestKeySeparatesParts: the parts are kept apart (a token and a path cannot be shifted into
// each other), and the token itself is not in the key.
func TestKeySeparatesParts(t *testing.T) {
	if Key("ab", "c") == Key("a", "bc") {
		t.Error(`Key("ab", "c") == Key("a", "bc")`)
	}
	if Key("t") == Key("t", "") {
		t.Error(`Key("t") == Key("t", "")`)
	}
	k := Key("secret-token")
	if string(k[:len("secret")]) == "secret" {
		t.Error("the key starts with the token")
	}
}
