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
	table, err := Table(trs)
	if err != nil {
		return err
	}
	for p, cs := range table {
		into.qos[lpmKey(class, p)] = bpf.FromPodQosValue{Dscp: dscp[cs[0].Index], Rule: uint16(cs[0].Index), NsId: uint32(ns)}
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
