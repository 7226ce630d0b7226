package main

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
)

// firewallStatuses counts the EgressFirewalls' statuses from one watch. Listing 10,000 of
// them every second was work for the API server the agents share, and at full size on two
// cores it stopped answering that list within a minute.
type firewallStatuses struct {
	store  cache.Store
	synced cache.InformerSynced
}

// watchFirewallStatuses starts the watch; it keeps of each object what the counts read.
func (h *harness) watchFirewallStatuses(ctx context.Context) *firewallStatuses {
	lw := cache.NewListWatchFromClient(h.c.ovn.K8sOVNV1().RESTClient(), "egressfirewalls", metav1.NamespaceAll, fields.Everything())
	inf := cache.NewSharedIndexInformer(lw, &ovnv1.EgressFirewall{}, 0, cache.Indexers{})
	_ = inf.SetTransform(func(o any) (any, error) {
		if ef, ok := o.(*ovnv1.EgressFirewall); ok {
			return &ovnv1.EgressFirewall{
				ObjectMeta: metav1.ObjectMeta{Name: ef.Name, Namespace: ef.Namespace, ResourceVersion: ef.ResourceVersion, Labels: ef.Labels},
				Status:     ovnv1.EgressFirewallStatus{Status: ef.Status.Status, Messages: make([]string, len(ef.Status.Messages))},
			}, nil
		}
		return o, nil
	})
	go inf.Run(ctx.Done())
	return &firewallStatuses{store: inf.GetStore(), synced: inf.HasSynced}
}

// count returns, of the EgressFirewalls selector matches, how many have the aggregate status
// applied and how many node entries they hold.
func (s *firewallStatuses) count(selector string) (applied, entries int, err error) {
	sel, err := labels.Parse(selector)
	if err != nil {
		return 0, 0, fmt.Errorf("selector %q: %w", selector, err)
	}
	for _, o := range s.store.List() {
		ef := o.(*ovnv1.EgressFirewall)
		if !sel.Matches(labels.Set(ef.Labels)) {
			continue
		}
		entries += len(ef.Status.Messages)
		if ef.Status.Status == "EgressFirewall Rules applied" {
			applied++
		}
	}
	return applied, entries, nil
}
