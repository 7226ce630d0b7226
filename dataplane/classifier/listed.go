package classifier

import (
	"net/netip"
	"slices"

	"github.com/egressd/egressd/dataplane"
)

// lists are the lists that the maps made from one list alone were last written from.
type lists struct {
	cluster, steerExempt listed[netip.Prefix]
	frontends            listed[dataplane.Frontend]
	qosRules             listed[qosText]
}

// qosText is one EgressQoS rule's text, keyed by its namespace's id.
type qosText struct {
	id    nsID
	index int
	text  string
}

// listed is the list one map was last written from in full. A map made from a list alone (the
// cluster networks, the frontends, the exempt destinations, the QoS rule texts) needs neither
// making nor diffing while its list stays the same: at 5,000 nodes an exemption list holds
// 5,000 addresses and a thousand EgressQoS hold 2,000 rule texts, and making their maps again
// at every sync was most of the classifier's part of an edit's sync.
type listed[T comparable] struct {
	list []T
	// known: list is what the map holds (false before the first write, and after a failed one).
	known bool
}

// unchanged says whether the map holds what list makes.
func (l *listed[T]) unchanged(list []T) bool { return l.known && slices.Equal(l.list, list) }

// write runs write unless list is unchanged, and remembers list once written in full.
func (l *listed[T]) write(list []T, write func() error) error {
	if l.unchanged(list) {
		return nil
	}
	l.known = false
	if err := write(); err != nil {
		return err
	}
	l.list, l.known = slices.Clone(list), true
	return nil
}
