package cluster

import (
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/egressd/egressd/watchers"
	"github.com/egressd/egressd/watchers/watcherstest"
)

func pod(name, node string, host bool, phase corev1.PodPhase, ips ...string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec:       corev1.PodSpec{NodeName: node, HostNetwork: host},
		Status:     corev1.PodStatus{Phase: phase},
	}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	return p
}

func TestCompileLocalPods(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, watchers.PodIndexers)
	for _, p := range []*corev1.Pod{
		pod("dual", "n1", false, corev1.PodRunning, "10.244.1.5", "fd00::5"),
		pod("pending-with-ip", "n1", false, corev1.PodPending, "10.244.1.6"),
		pod("no-ip-yet", "n1", false, corev1.PodPending),
		pod("host", "n1", true, corev1.PodRunning, "192.0.2.1"),
		pod("done", "n1", false, corev1.PodSucceeded, "10.244.1.7"),
		pod("failed", "n1", false, corev1.PodFailed, "10.244.1.8"),
		pod("elsewhere", "n2", false, corev1.PodRunning, "10.244.2.5"),
		pod("bad-ip", "n1", false, corev1.PodRunning, "not-an-ip"),
	} {
		_ = idx.Add(watchers.CachedPod(p))
	}
	pods, err := LocalPods(&watchers.Snapshot{PodIndex: idx}, "n1")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range pods {
		got = append(got, p.Origin.Name)
		if p.Origin.Name == "dual" && !slices.Equal(p.IPs, []netip.Addr{netip.MustParseAddr("10.244.1.5"), netip.MustParseAddr("fd00::5")}) {
			t.Errorf("dual IPs %v", p.IPs)
		}
	}
	slices.Sort(got)
	if want := []string{"dual", "pending-with-ip"}; !slices.Equal(got, want) {
		t.Errorf("local pods %v, want %v", got, want)
	}
}

// A reused address belongs to the live pod, not to the one still terminating.
func TestCompileLocalPodsReusedAddress(t *testing.T) {
	old := pod("old", "n1", false, corev1.PodRunning, "10.244.1.5")
	old.Namespace = "a"
	now := metav1.Now()
	old.DeletionTimestamp = &now
	fresh := pod("fresh", "n1", false, corev1.PodRunning, "10.244.1.5")
	fresh.Namespace = "b"
	pods, err := LocalPods(watcherstest.Snapshot(old, fresh), "n1")
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 1 || pods[0].Origin.Name != "fresh" {
		t.Errorf("local pods %+v, want only the live pod to own 10.244.1.5", pods)
	}
}
