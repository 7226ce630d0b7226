package watchers

import (
	"slices"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// interner hands out one copy of equal values, so that the objects the caches hold share what
// they have in common: every decoded object arrives with strings and maps of its own, though
// the pods of one ReplicaSet carry the same labels, and thousands of EgressFirewalls the same
// rule types, protocols and addresses. It remembers two generations of at most max values:
// when the current one fills it becomes the previous and the one before is forgotten, so its
// own memory is bounded whatever the cluster's churn (a forgotten value stays alive in the
// objects that hold it; only its later copies are no longer shared with them).
type interner[K comparable, V any] struct {
	mu        sync.Mutex
	max       int
	cur, prev map[K]V
}

func newInterner[K comparable, V any](max int) *interner[K, V] {
	return &interner[K, V]{max: max, cur: map[K]V{}}
}

// get is the value remembered under k, else the one made (then remembered).
func (in *interner[K, V]) get(k K, make func() V) V {
	in.mu.Lock()
	defer in.mu.Unlock()
	if v, ok := in.cur[k]; ok {
		return v
	}
	v, ok := in.prev[k]
	if !ok {
		v = make()
	}
	if len(in.cur) >= in.max {
		in.prev, in.cur = in.cur, map[K]V{}
	}
	in.cur[k] = v
	return v
}

// Sizes of the interners' generations: a few times what one list brings in that repeats (label
// sets of ReplicaSets, namespace and node names of the cached pods), a few MB at most.
const (
	internedStrings   = 16384
	internedLabelSets = 4096
)

var (
	strs      = newInterner[string, string](internedStrings)
	labelSets = newInterner[string, map[string]string](internedLabelSets)
	selectors = newInterner[string, *metav1.LabelSelector](internedLabelSets)
)

// intern is s, shared with the cached objects that hold an equal string.
func intern(s string) string {
	if s == "" {
		return s
	}
	return strs.get(s, func() string { return s })
}

// internLabels is m, shared with the cached objects whose labels are equal. The map must not be
// modified after: the caches' objects are read only.
func internLabels(m map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	return labelSets.get(labelsKey(m), func() map[string]string {
		out := make(map[string]string, len(m))
		for k, v := range m {
			out[intern(k)] = intern(v)
		}
		return out
	})
}

// labelsKey is a text that equal label sets, and only they, share: keys sorted, each with its
// value, separated by a byte neither holds (a label's key and value are printable).
func labelsKey(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(m[k])
		b.WriteByte(0)
	}
	return b.String()
}

// internSelector is s, shared with the cached objects whose selector is equal (an
// EgressFirewall's nodeSelector: many namespaces allow the same nodes).
func internSelector(s *metav1.LabelSelector) *metav1.LabelSelector {
	if s == nil {
		return nil
	}
	var b strings.Builder
	b.WriteString(labelsKey(s.MatchLabels))
	for _, e := range s.MatchExpressions {
		b.WriteByte(1)
		b.WriteString(e.Key)
		b.WriteByte(0)
		b.WriteString(string(e.Operator))
		for _, v := range e.Values {
			b.WriteByte(0)
			b.WriteString(v)
		}
	}
	return selectors.get(b.String(), func() *metav1.LabelSelector {
		s.MatchLabels = internLabels(s.MatchLabels)
		return s
	})
}
