package main

import (
	"context"
	"fmt"
	"time"

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

// watchQoSStatuses returns how many EgressQoS have the aggregate status applied, from one
// watch that keeps of each object only that status.
func (h *harness) watchQoSStatuses(ctx context.Context) (applied func() int, synced cache.InformerSynced) {
	lw := cache.NewListWatchFromClient(h.c.ovn.K8sOVNV1().RESTClient(), "egressqoses", metav1.NamespaceAll, fields.Everything())
	inf := cache.NewSharedIndexInformer(lw, &ovnv1.EgressQoS{}, 0, cache.Indexers{})
	_ = inf.SetTransform(func(o any) (any, error) {
		if q, ok := o.(*ovnv1.EgressQoS); ok {
			return &ovnv1.EgressQoS{
				ObjectMeta: metav1.ObjectMeta{Name: q.Name, Namespace: q.Namespace, ResourceVersion: q.ResourceVersion},
				Status:     ovnv1.EgressQoSStatus{Status: q.Status.Status},
			}, nil
		}
		return o, nil
	})
	go inf.Run(ctx.Done())
	return func() int {
		n := 0
		for _, o := range inf.GetStore().List() {
			if o.(*ovnv1.EgressQoS).Status.Status == "EgressQoS Rules applied" {
				n++
			}
		}
		return n
	}, inf.HasSynced
}

// awaitQoS waits, at most h.wait, until every EgressQoS has the aggregate status applied,
// and records the time since begin: the steady minute starts after the statuses of every
// kind have settled, not only the EgressFirewalls'.
func (h *harness) awaitQoS(ctx context.Context, begin time.Time) (bool, error) {
	what := "agents start -> every EgressQoS's aggregate status applied"
	ctx, stopWatch := context.WithCancel(ctx) // not a watcher of its own in the steady minute
	defer stopWatch()
	applied, synced := h.watchQoSStatuses(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), synced) {
		return false, ctx.Err()
	}
	stop := progress(h.log, func() string {
		return fmt.Sprintf("EgressQoS aggregate statuses applied %d/%d", applied(), h.s.EgressQoS)
	})
	defer stop()
	deadline := time.Now().Add(h.wait)
	for n := applied(); n < h.s.EgressQoS; n = applied() {
		if time.Now().After(deadline) {
			h.record(what, fmt.Sprintf("not within %s: %d/%d applied", time.Since(begin).Round(time.Second), n, h.s.EgressQoS), "")
			return false, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	h.record(what, time.Since(begin).Round(100*time.Millisecond).String(), "")
	return true, nil
}
