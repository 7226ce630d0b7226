// Package egressqos compiles EgressQoS objects into this node's part of the desired state: each
// namespace's DSCP rules, and which of them select each local pod. Pure: no kernel, no API writes.
package egressqos

import (
	"fmt"
	"net/netip"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
)

// maxRules is upstream's limit of rules per EgressQoS (SEMANTICS.md section 2.2).
const maxRules = 1000

var anyDestination = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}

// Part is what EgressQoS adds to the node state.
type Part struct {
	QoS []dataplane.QoS
	// PodRules are, per local pod, the indices of its namespace's rules that select it.
	PodRules map[dataplane.Origin][]int
	// BackendDSCP mark local pods' traffic to Service backends outside the cluster networks,
	// after DNAT.
	BackendDSCP []dataplane.BackendDSCP
}

// Compile turns every EgressQoS into DSCP rules and records which rules select each local pod.
func Compile(in *cluster.Input) (Part, error) {
	part := Part{PodRules: map[dataplane.Origin][]int{}}
	all, err := in.Snap.EgressQoSes.List(labels.Everything())
	if err != nil {
		return part, err
	}
	for _, q := range all {
		if q.Name != "default" {
			continue
		}
		c := dataplane.QoS{Origin: dataplane.Origin{Kind: cluster.KindEgressQoS, Namespace: q.Namespace, Name: q.Name}}
		if len(q.Spec.Egress) > maxRules {
			c.Err = fmt.Errorf("cannot create EgressQoS with %d rules - maximum is %d", len(q.Spec.Egress), maxRules)
			part.QoS = append(part.QoS, c)
			continue
		}
		selectors := make([]labels.Selector, len(q.Spec.Egress))
		var errs []error
		for i, r := range q.Spec.Egress {
			rule := dataplane.QoSRule{Index: i, DSCP: uint8(r.DSCP), Prefixes: anyDestination,
				Text: fmt.Sprintf("DSCP %d to any for pods %s", r.DSCP, metav1.FormatLabelSelector(&r.PodSelector))}
			dst := "any"
			var err error
			if r.DstCIDR != nil {
				dst = *r.DstCIDR
				var p netip.Prefix
				if p, err = cluster.ParseCIDR(dst); err == nil {
					rule.Prefixes = []netip.Prefix{p}
				}
				rule.Text = fmt.Sprintf("DSCP %d to %s for pods %s", r.DSCP, dst, metav1.FormatLabelSelector(&r.PodSelector))
			}
			if err == nil {
				selectors[i], err = metav1.LabelSelectorAsSelector(&r.PodSelector)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("cannot create egressqos Rule to destination %s for namespace %s: %w", dst, q.Namespace, err))
				continue
			}
			c.Rules = append(c.Rules, rule)
		}
		// Upstream's message: every rule's error, several on one line as "[e1, e2]".
		c.Err = utilerrors.NewAggregate(errs)
		part.QoS = append(part.QoS, c)
		if c.Err != nil {
			continue
		}
		for _, p := range in.Pods {
			if p.Origin.Namespace != q.Namespace {
				continue
			}
			pod, err := in.Snap.Pods.Pods(p.Origin.Namespace).Get(p.Origin.Name)
			if err != nil {
				continue
			}
			for j, sel := range selectors {
				if sel.Matches(labels.Set(pod.Labels)) {
					part.PodRules[p.Origin] = append(part.PodRules[p.Origin], j)
				}
			}
		}
	}
	part.BackendDSCP, err = serviceBackendDSCP(in, part)
	return part, err
}

// serviceBackendDSCP judges Service backends outside the cluster networks by the EgressQoS
// rules that select each local pod, as OVN's to-lport QoS does after load balancing (it sees
// the endpoint's address): the first rule, in order, whose destination holds the backend gives
// the (pod, backend, protocol, port) its DSCP, which the dataplane sets after DNAT. The
// classifier, before DNAT, only sees the Service's address.
func serviceBackendDSCP(in *cluster.Input, part Part) ([]dataplane.BackendDSCP, error) {
	backends, err := cluster.ExternalBackends(in)
	if err != nil || len(backends) == 0 {
		return nil, err
	}
	rules := map[string]dataplane.QoS{}
	for _, q := range part.QoS {
		if q.Err == nil {
			rules[q.Origin.Namespace] = q
		}
	}
	var out []dataplane.BackendDSCP
	for _, p := range in.Pods {
		q, ok := rules[p.Origin.Namespace]
		if !ok || len(part.PodRules[p.Origin]) == 0 {
			continue
		}
		for _, b := range backends {
			for _, j := range part.PodRules[p.Origin] { // in rule order
				r := q.Rules[j]
				if !slices.ContainsFunc(r.Prefixes, func(pfx netip.Prefix) bool { return pfx.Contains(b.Addr) }) {
					continue
				}
				origin := q.Origin
				origin.Rule = r.Index
				for _, ip := range p.IPs {
					if ip.Is4() == b.Addr.Is4() {
						out = append(out, dataplane.BackendDSCP{Origin: origin, Pod: ip, Backend: b.Addr, Protocol: b.Proto, Port: b.Port, DSCP: r.DSCP})
					}
				}
				break
			}
		}
	}
	return out, nil
}
