package classifier

import (
	"github.com/egressd/egressd/bpf"
	"github.com/egressd/egressd/dataplane"
)

// qosEntries adds the LPM entries of a QoS class (the rules of namespace ns that select a pod)
// to into.
func qosEntries(class qosClass, ns nsID, rules []dataplane.QoSRule, into *content) error {
	trs := make([]Rule, len(rules))
	dscp := map[int]uint8{}
	for i, r := range rules {
		trs[i] = Rule{Index: r.Index, Prefixes: r.Prefixes}
		dscp[r.Index] = r.DSCP
	}
	entries, _ := Table(trs) // no ports: every prefix has a first rule
	for p, e := range entries {
		i := e.Portless.Index
		into.qos[lpmKey(class, p)] = bpf.FromPodQosValue{Dscp: dscp[i], Rule: uint16(i), NsId: uint32(ns)}
	}
	return nil
}

// selected are the rules of indices idx.
func selected(rules []dataplane.QoSRule, idx []int) []dataplane.QoSRule {
	var out []dataplane.QoSRule
	for _, r := range rules {
		for _, i := range idx {
			if r.Index == i {
				out = append(out, r)
			}
		}
	}
	return out
}
