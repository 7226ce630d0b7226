package cniserver

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers"
)

func snapshot(pods ...*watchers.Pod) *watchers.Snapshot {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, watchers.PodsByNode: watchers.PodIndexers[watchers.PodsByNode]})
	for _, p := range pods {
		_ = idx.Add(p)
	}
	return &watchers.Snapshot{Pods: watchers.NewPodLister(idx), PodIndex: idx}
}

func pod(ns, name string, lbl map[string]string, ips ...string) *watchers.Pod {
	p := &watchers.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbl, UID: ktypes.UID("uid-" + name)}, Spec: watchers.PodSpec{NodeName: "n"}}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	return p
}

// The Pod object without addresses plus the CNI's addresses: the compile steps see the pod with
// its labels (pod lister, selectors) and LocalPods lists it; the API object's later labels win.
func TestOverlayMergesAnnouncedPods(t *testing.T) {
	s := NewStore()
	obj := pod("ns", "web", map[string]string{"app": "web"})
	other := pod("ns", "db", nil, "10.0.0.9")
	a4, a6 := netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("fd00::5")
	s.announce("sb1", obj, []netip.Addr{a4, a6}, nil, false)
	base := snapshot(obj, other)
	base.Generations = watchers.NewGenerations(&corev1.Pod{})
	snap, announced := s.Overlay(base)
	if len(announced) != 1 || len(announced[0].Status.PodIPs) != 2 {
		t.Fatalf("announced %+v", announced)
	}
	// Who follows the pods' journal learns which pods the overlay lists: their changes are in
	// no journal.
	if keys := snap.Generations.Overlaid(&corev1.Pod{}); !slices.Equal(keys, []string{"ns/web"}) {
		t.Errorf("overlaid %v, want ns/web", keys)
	}
	sel := labels.SelectorFromSet(labels.Set{"app": "web"})
	got, _ := snap.Pods.Pods("ns").List(sel)
	if len(got) != 1 || got[0].Status.PodIP != "10.0.0.5" {
		t.Errorf("selector lists %+v, want web with its CNI address", got)
	}
	all, _ := snap.Pods.List(labels.Everything())
	if len(all) != 2 {
		t.Errorf("all pods: %d, want 2", len(all))
	}
	local, err := cluster.LocalPods(snap, "n", announced...)
	if err != nil || len(local) != 2 {
		t.Fatalf("LocalPods: %+v %v", local, err)
	}
	// The object's labels change: the overlay follows them, keeping the CNI addresses.
	relabeled := pod("ns", "web", map[string]string{"app": "other"})
	snap, _ = s.Overlay(snapshot(relabeled))
	if got, _ := snap.Pods.Pods("ns").List(sel); len(got) != 0 {
		t.Errorf("after relabel the selector still lists %+v", got)
	}
	// The object shows the sandbox's addresses: the overlay steps aside (a node's pods are not
	// copied at every sync for as long as they run); other addresses keep it.
	shown := pod("ns", "web", map[string]string{"app": "web"}, "fd00::5", "10.0.0.5")
	if _, announced := s.Overlay(snapshot(shown)); len(announced) != 0 {
		t.Errorf("object with the sandbox's addresses: still overlaid %+v", announced)
	}
	if _, announced := s.Overlay(snapshot(shown)); len(announced) != 0 {
		t.Errorf("that object again: overlaid %+v", announced)
	}
	if _, announced := s.Overlay(snapshot(pod("ns", "web", nil, "10.0.0.5"))); len(announced) != 1 {
		t.Errorf("object with only some of the sandbox's addresses: overlay %+v, want the pod", announced)
	}
	// The object gone while the sandbox lives (a forced deletion): the pod stays classified.
	if _, announced := s.Overlay(snapshot()); len(announced) != 1 {
		t.Errorf("object gone before the sandbox's DEL: overlay %+v, want the pod", announced)
	}
	// DEL forgets it.
	s.forget("sb1")
	if _, announced := s.Overlay(snapshot(obj)); len(announced) != 0 {
		t.Errorf("after DEL: %+v", announced)
	}
}

// A pod is programmed once a state holding it with all its addresses applied without failure of
// the pod or of its namespace's objects; entries per routing mark count together.
func TestAppliedReleasesWaiters(t *testing.T) {
	s := NewStore()
	a4, a6 := netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("fd00::5")
	e := s.announce("sb1", pod("ns", "web", nil), []netip.Addr{a4, a6}, nil, false)
	origin := dataplane.Origin{Kind: cluster.KindPod, Namespace: "ns", Name: "web"}
	var st dataplane.State
	s.Applied(&st, dataplane.Result{}) // a sync that began before the ADD
	st.Classifier.Pods = []dataplane.Pod{{Origin: origin, IPs: []netip.Addr{a4}, Mark: 1}}
	s.Applied(&st, dataplane.Result{}) // only one address
	st.Classifier.Pods = append(st.Classifier.Pods, dataplane.Pod{Origin: origin, IPs: []netip.Addr{a6}})
	fw := dataplane.Origin{Kind: cluster.KindEgressFirewall, Namespace: "ns", Name: "default"}
	s.Applied(&st, dataplane.Result{Failed: map[dataplane.Origin]error{fw: errors.New("boom")}})
	select {
	case <-e.done:
		t.Fatal("programmed too early")
	default:
	}
	if e.lastErr == nil {
		t.Errorf("the namespace's failure is not recorded")
	}
	s.Applied(&st, dataplane.Result{})
	select {
	case <-e.done:
	default:
		t.Fatal("not programmed")
	}
	if err := s.check(podKey{"ns", "web"}, []netip.Addr{a4, a6}); err != nil {
		t.Errorf("check: %v", err)
	}
	if err := s.check(podKey{"ns", "web"}, []netip.Addr{netip.MustParseAddr("10.0.0.6")}); err == nil {
		t.Errorf("check of other addresses passed")
	}
}

// A pod the dataplane reports in force during a sync is programmed then, under the same rules as
// at the sync's end: all its addresses, no failure of it or of its namespace's policies (another
// pod's failure is not its own); the others wait for the end of the sync.
func TestInForceReleasesWaitersEarly(t *testing.T) {
	s := NewStore()
	a4, b4, c4 := netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("10.0.0.6"), netip.MustParseAddr("10.0.0.7")
	web := s.announce("sb1", pod("ns", "web", nil), []netip.Addr{a4}, nil, false)
	db := s.announce("sb2", pod("ns", "db", nil), []netip.Addr{b4}, nil, false)
	bad := s.announce("sb3", pod("other", "x", nil), []netip.Addr{c4}, nil, false)
	origin := func(ns, name string) dataplane.Origin {
		return dataplane.Origin{Kind: cluster.KindPod, Namespace: ns, Name: name}
	}
	st := &dataplane.State{Classifier: dataplane.ClassifierState{Pods: []dataplane.Pod{
		{Origin: origin("ns", "web"), IPs: []netip.Addr{a4}}, {Origin: origin("ns", "db"), IPs: []netip.Addr{b4}},
		{Origin: origin("other", "x"), IPs: []netip.Addr{c4}}}}}
	failed := map[dataplane.Origin]error{{Kind: cluster.KindEgressFirewall, Namespace: "other", Name: "default"}: errors.New("boom")}
	s.InForce(st, []dataplane.Origin{origin("ns", "web"), origin("other", "x")}, failed)
	released := func(e *entry) bool {
		select {
		case <-e.done:
			return true
		default:
			return false
		}
	}
	if !released(web) {
		t.Error("web, in force, is not programmed")
	}
	if err := s.check(podKey{"ns", "web"}, []netip.Addr{a4}); err != nil {
		t.Errorf("CHECK right after web's ADD returned: %v", err)
	}
	if released(db) {
		t.Error("db, not reported in force, is programmed before the sync ended")
	}
	if released(bad) || bad.lastErr == nil {
		t.Errorf("x, whose namespace's firewall failed: programmed %v, error %v", released(bad), bad.lastErr)
	}
	// At the sync's end another pod of db's namespace failed (its interface gone): not db's.
	failed[origin("ns", "gone")] = errors.New("no route to pod address 10.0.0.8")
	s.Applied(st, dataplane.Result{Failed: failed})
	if !released(db) || released(bad) {
		t.Errorf("at the sync's end: db programmed %v (want true), x programmed %v (want false)", released(db), released(bad))
	}
	if err := s.check(podKey{"ns", "web"}, []netip.Addr{a4}); err != nil {
		t.Errorf("CHECK of web after another pod of its namespace failed: %v", err)
	}
}

// The host-side interfaces of a sandbox reach the pod with the sandbox's addresses (after its Pod
// object shows them too), not a pod of the same name whose addresses are others now, nor a pod
// another node announced.
func TestHostInterfacesFollowTheSandbox(t *testing.T) {
	s := NewStore()
	a4, b4 := netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("10.0.0.6")
	s.announce("sb1", pod("ns", "web", nil), []netip.Addr{a4}, []string{"cni0", "veth1"}, false)
	s.announce("remote:ns/far", pod("ns", "far", nil), []netip.Addr{b4}, []string{"veth9"}, true)
	origin := func(name string) dataplane.Origin {
		return dataplane.Origin{Kind: cluster.KindPod, Namespace: "ns", Name: name}
	}
	pods := []dataplane.Pod{
		{Origin: origin("web"), IPs: []netip.Addr{a4}},
		{Origin: origin("far"), IPs: []netip.Addr{b4}},
		{Origin: origin("db"), IPs: []netip.Addr{netip.MustParseAddr("10.0.0.7")}},
	}
	s.HostInterfaces(pods)
	if got := pods[0].HostInterfaces; len(got) != 2 || got[0] != "cni0" || got[1] != "veth1" {
		t.Errorf("web: %v, want [cni0 veth1]", got)
	}
	if pods[1].HostInterfaces != nil || pods[2].HostInterfaces != nil {
		t.Errorf("far, db: %v, %v, want none", pods[1].HostInterfaces, pods[2].HostInterfaces)
	}
	moved := []dataplane.Pod{{Origin: origin("web"), IPs: []netip.Addr{b4}}}
	s.HostInterfaces(moved)
	if moved[0].HostInterfaces != nil {
		t.Errorf("web at another address: %v, want none", moved[0].HostInterfaces)
	}
}

// A result kept under the snapshot's generation of pods is not kept across an announcement or
// a forgotten sandbox: the overlay's changes move that generation.
func TestOverlayMovesThePodGeneration(t *testing.T) {
	s := NewStore()
	base := snapshot()
	base.Generations = watchers.NewGenerations(&corev1.Pod{})
	gen := func() uint64 {
		snap, _ := s.Overlay(base)
		g, known := snap.Generations.Of(&corev1.Pod{})
		if !known {
			t.Fatal("the overlay's generations do not know pods")
		}
		return g
	}
	g0 := gen()
	s.announce("sb1", pod("ns", "web", nil), []netip.Addr{netip.MustParseAddr("10.0.0.5")}, nil, false)
	g1 := gen()
	if g1 == g0 {
		t.Error("an announced pod left the generation of pods as it was")
	}
	if g := gen(); g != g1 {
		t.Errorf("no change, yet the generation moved from %d to %d", g1, g)
	}
	s.forget("sb1")
	if g := gen(); g == g1 {
		t.Error("a forgotten sandbox left the generation of pods as it was")
	}
}
