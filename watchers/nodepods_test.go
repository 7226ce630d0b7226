package watchers_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egressd/egressd/api/generated/clientset/versioned"
	"github.com/egressd/egressd/test/controlplane"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/watchers"
)

func TestMain(m *testing.M) { controlplane.Main(m) }

// TestNodePodsReadsItsNodeAndTheServedPods, against a real API server: an agent's cache holds
// its node's pods, and of other nodes' pods only those of the scopes it asks for (a label
// selector cluster-wide, or a namespace), as they come and go; each change of the scopes is a
// change of the pods (a compile keyed by the pods' generation runs again), and a served pod
// created later arrives.
func TestNodePodsReadsItsNodeAndTheServedPods(t *testing.T) {
	cp := controlplane.Shared(t)
	kube := cp.Client(t)
	egress, err := versioned.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	ns1, ns2 := cp.Namespace(t), cp.Namespace(t)
	gw := "gw-" + ns1 // a label value no other test's pod has
	pod := func(ns, name, node string, l map[string]string) {
		t.Helper()
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: l},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "none"}}}}
		if _, err := kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod(ns1, "own", "n1", map[string]string{"app": "web"})
	pod(ns1, "gateway", "n2", map[string]string{"app": gw})
	pod(ns1, "other", "n2", map[string]string{"app": "web"})
	pod(ns2, "served", "n2", nil)

	w, err := watchers.New(kube, egress, 0, watchers.NodePods("n1"))
	if err != nil {
		t.Fatal(err)
	}
	changed := w.Subscribe(false, &corev1.Pod{})
	if err := w.Start(ctx, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Shutdown)
	snap := w.Snapshot()
	cached := func() []string {
		t.Helper()
		pods, err := snap.Pods.List(labels.Everything())
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range pods {
			if p.Namespace == ns1 || p.Namespace == ns2 {
				out = append(out, p.Namespace+"/"+p.Name)
			}
		}
		slices.Sort(out)
		return out
	}
	want := func(what string, names ...string) {
		t.Helper()
		slices.Sort(names)
		if got := cached(); !slices.Equal(got, names) {
			t.Errorf("%s: cached %v, want %v", what, got, names)
		}
	}
	serve := func(scopes ...watchers.PodScope) {
		t.Helper()
		before, _ := snap.Generations.Of(&corev1.Pod{})
		wait, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := w.ServePods(wait, scopes); err != nil {
			t.Fatal(err)
		}
		if after, _ := snap.Generations.Of(&corev1.Pod{}); after == before {
			t.Errorf("serving %v: the pods' generation did not move", scopes)
		}
	}

	want("the node's own", ns1+"/own")
	serve(watchers.PodScope{Selector: "app=" + gw})
	want("with the gateway pods' label", ns1+"/own", ns1+"/gateway")
	if _, err := snap.Pods.Pods(ns1).Get("gateway"); err != nil {
		t.Errorf("get the served pod: %v", err)
	}
	if _, err := snap.Pods.Pods(ns1).Get("other"); !apierrors.IsNotFound(err) {
		t.Errorf("get a pod of another node not served: %v, want not found", err)
	}
	if objs, err := snap.PodIndex.ByIndex(watchers.PodsByNode, "n1"); err != nil || len(objs) != 1 {
		t.Errorf("pods of n1 by index: %d (%v), want its own alone", len(objs), err)
	}

	// A served pod created now arrives, and signals.
	for len(changed) > 0 {
		<-changed
	}
	pod(ns2, "late", "n3", map[string]string{"app": gw})
	poll.Eventually(t, "the new gateway pod cached", 10*time.Second, func() error {
		if _, err := snap.Pods.Pods(ns2).Get("late"); err != nil {
			return err
		}
		return nil
	})
	select { // the handlers run after the cache holds the pod
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Error("the served pod's arrival signalled no change")
	}

	// A new scope that cannot fill leaves the old ones in place.
	if err := w.ServePods(ctx, []watchers.PodScope{{Selector: "app in ("}}); err == nil {
		t.Error("serving a scope with a broken selector: no error")
	}
	want("after a scope that could not fill", ns1+"/own", ns1+"/gateway", ns2+"/late")

	serve(watchers.PodScope{Namespace: ns2})
	want("a namespace instead", ns1+"/own", ns2+"/served", ns2+"/late")

	// Past 32 namespaces one cluster-wide watch serves them, and keeps only their pods: ns1's
	// "other" stays out while ns2 and 40 namespaces with no pod are served.
	many := []watchers.PodScope{{Namespace: ns2}}
	for i := range 40 {
		many = append(many, watchers.PodScope{Namespace: fmt.Sprintf("%s-none-%d", ns2, i)})
	}
	serve(many...)
	want("many namespaces", ns1+"/own", ns2+"/served", ns2+"/late")
	pod(ns2, "later", "n3", nil)
	poll.Eventually(t, "a pod of a served namespace cached by the cluster-wide watch", 10*time.Second, func() error {
		_, err := snap.Pods.Pods(ns2).Get("later")
		return err
	})
	pod(ns1, "unserved", "n3", nil)
	serve(append(many, watchers.PodScope{Namespace: ns1, Selector: "app=" + gw})...) // one new: watched alone
	want("many namespaces and ns1's gateways", ns1+"/own", ns1+"/gateway", ns2+"/served", ns2+"/late", ns2+"/later")

	serve()
	want("none served", ns1+"/own")
}
