package watchers

import (
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
)

// podIndexer is a served scope's cache of pods.
func podIndexer(pods ...*Pod) cache.Indexer { return indexed(servedPodIndexers(), pods) }

// localIndexer is the node's own cache of pods: also by node.
func localIndexer(pods ...*Pod) cache.Indexer {
	indexers := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	maps.Copy(indexers, PodIndexers)
	return indexed(indexers, pods)
}

func indexed(indexers cache.Indexers, pods []*Pod) cache.Indexer {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, indexers)
	for _, p := range pods {
		_ = idx.Add(p)
	}
	return idx
}

func testPod(ns, name, node, ip string, l map[string]string) *Pod {
	return CachedPod(apiPod(ns, name, node, ip, l))
}

// apiPod is a pod as the API server sends it.
func apiPod(ns, name, node, ip string, l map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: l}, Spec: corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{PodIPs: []corev1.PodIP{{IP: ip}}}}
}

// TestPodUnionReadsEachPodOnce: the node's own pods and each served scope's read as one
// cache: a pod two caches hold is listed once, as the node's own cache has it; namespaces,
// selectors and indexes apply across them; a pod no cache holds is not found.
func TestPodUnionReadsEachPodOnce(t *testing.T) {
	web := map[string]string{"app": "web"}
	own := testPod("a", "own", "n1", "10.244.1.5", web)
	stale := testPod("a", "own", "n1", "10.244.1.99", web) // a served scope's older copy
	gw := testPod("b", "gw", "n2", "10.244.2.5", map[string]string{"app": "gw"})
	other := testPod("a", "other", "n3", "10.244.3.5", web)
	s := &servedPods{scopes: map[PodScope]*scopeInformer{}}
	u := &podUnion{local: localIndexer(own), served: s}
	s.scopes[PodScope{Selector: "app"}] = &scopeInformer{indexer: podIndexer(stale, gw)}
	s.scopes[PodScope{Namespace: "a"}] = &scopeInformer{indexer: podIndexer(other)}

	names := func(pods []*Pod, err error) []string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range pods {
			out = append(out, p.Namespace+"/"+p.Name+"@"+p.Status.PodIPs[0].IP)
		}
		slices.Sort(out)
		return out
	}
	if got, want := names(u.List(labels.Everything())), []string{"a/other@10.244.3.5", "a/own@10.244.1.5", "b/gw@10.244.2.5"}; !slices.Equal(got, want) {
		t.Errorf("List: %v, want %v", got, want)
	}
	if got, want := names(u.Pods("a").List(labels.SelectorFromSet(web))), []string{"a/other@10.244.3.5", "a/own@10.244.1.5"}; !slices.Equal(got, want) {
		t.Errorf("List of namespace a, app=web: %v, want %v", got, want)
	}
	if p, err := u.Pods("b").Get("gw"); err != nil || p != gw {
		t.Errorf("Get b/gw: %v, %v", p, err)
	}
	if p, err := u.Pods("a").Get("own"); err != nil || p != own {
		t.Errorf("Get a/own: %v (%v), want the node's own copy", p, err)
	}
	if _, err := u.Pods("b").Get("none"); !apierrors.IsNotFound(err) {
		t.Errorf("Get b/none: %v, want not found", err)
	}
	objs, err := u.ByIndex(PodsByIP, "10.244.2.5")
	if err != nil || len(objs) != 1 || objs[0] != gw {
		t.Errorf("by address 10.244.2.5: %v (%v), want the gateway pod", objs, err)
	}
	if objs, _ := u.ByIndex(PodsByNode, "n1"); len(objs) != 1 || objs[0] != own {
		t.Errorf("pods of n1: %v, want the node's own copy once", objs)
	}
}
