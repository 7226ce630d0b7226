package nodeagent

import (
	"fmt"
	"net/netip"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egressd/egressd/dataplane"
)

var anyDestination = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}

// compileQoS turns every EgressQoS into DSCP rules and records, on each local pod, which rules
// select it. It runs after compileLocalPods.
func compileQoS(in *input, into *dataplane.State) error {
	all, err := in.snap.EgressQoSes.List(labels.Everything())
	if err != nil {
		return err
	}
	for _, q := range all {
		if q.Name != "default" {
			continue
		}
		c := dataplane.QoS{Origin: dataplane.Origin{Kind: "EgressQoS", Namespace: q.Namespace, Name: q.Name}}
		if len(q.Spec.Egress) > maxQoSRules {
			c.Err = fmt.Errorf("cannot create EgressQoS with %d rules - maximum is %d", len(q.Spec.Egress), maxQoSRules)
			into.QoS = append(into.QoS, c)
			continue
		}
		selectors := make([]labels.Selector, len(q.Spec.Egress))
		for i, r := range q.Spec.Egress {
			rule := dataplane.QoSRule{Index: i, DSCP: uint8(r.DSCP), Prefixes: anyDestination,
				Text: fmt.Sprintf("DSCP %d to any for pods %s", r.DSCP, metav1.FormatLabelSelector(&r.PodSelector))}
			if r.DstCIDR != nil {
				p, err := netip.ParsePrefix(*r.DstCIDR)
				if err != nil {
					c.Err = fmt.Errorf("rule %d: invalid dstCIDR %q: %w", i, *r.DstCIDR, err)
					break
				}
				rule.Prefixes = []netip.Prefix{p.Masked()}
				rule.Text = fmt.Sprintf("DSCP %d to %s for pods %s", r.DSCP, *r.DstCIDR, metav1.FormatLabelSelector(&r.PodSelector))
			}
			if selectors[i], err = metav1.LabelSelectorAsSelector(&r.PodSelector); err != nil {
				c.Err = fmt.Errorf("rule %d: invalid podSelector: %w", i, err)
				break
			}
			c.Rules = append(c.Rules, rule)
		}
		into.QoS = append(into.QoS, c)
		if c.Err != nil {
			continue
		}
		for i := range into.LocalPods {
			p := &into.LocalPods[i]
			if p.Origin.Namespace != q.Namespace {
				continue
			}
			pod, err := in.snap.Pods.Pods(p.Origin.Namespace).Get(p.Origin.Name)
			if err != nil {
				continue
			}
			for j, sel := range selectors {
				if sel.Matches(labels.Set(pod.Labels)) {
					p.QoSRules = append(p.QoSRules, j)
				}
			}
		}
	}
	return nil
}
