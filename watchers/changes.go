package watchers

import (
	"reflect"
	"sync"

	"k8s.io/client-go/tools/cache"
)

// Changes names the objects that changed, for a consumer that looks again at those alone: the
// status writer looked again at every one of a node's 10,000 entries after any firewall's
// change. C signals as Subscribe's channel does; Take says what changed since the last Take.
type Changes struct {
	C <-chan struct{}

	mu      sync.Mutex
	objects map[ChangedObject]bool
	all     bool
}

// ChangedObject is an object that changed: its kind (its Go type's name, "EgressFirewall"),
// namespace and name.
type ChangedObject struct{ Kind, Namespace, Name string }

// maxChanges bounds what Changes keeps between two Takes: past it, it says every object.
const maxChanges = 4096

// SubscribeChanges is Subscribe, naming the objects that changed. Call it before Start.
func (w *Watchers) SubscribeChanges(statusToo bool, kinds ...any) *Changes {
	c := &Changes{}
	c.C = w.subscribe(statusToo, c, kinds)
	return c
}

// add notes the object of key ("namespace/name", "" when unknown), of kind, as changed (before
// the subscriber's channel is signalled).
func (c *Changes) add(kind any, key string) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.all:
	case key == "" || err != nil || len(c.objects) >= maxChanges:
		c.all, c.objects = true, nil
	default:
		if c.objects == nil {
			c.objects = map[ChangedObject]bool{}
		}
		c.objects[ChangedObject{Kind: kindName(kind), Namespace: ns, Name: name}] = true
	}
}

// Take returns the objects that changed since the last Take, or all: more changed than it
// keeps, or one it could not name.
func (c *Changes) Take() (objects []ChangedObject, all bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for o := range c.objects {
		objects = append(objects, o)
	}
	all = c.all
	c.objects, c.all = nil, false
	return objects, all
}

// kindName is the name of kind's Go type (kind a pointer to a value of it, or the value).
func kindName(kind any) string {
	t := reflect.TypeOf(kind)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Name()
}
