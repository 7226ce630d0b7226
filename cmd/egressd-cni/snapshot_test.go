package main

import (
	"k8s.io/client-go/tools/cache"

	"github.com/egressd/egressd/watchers"
)

func emptySnapshot() *watchers.Snapshot {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	return &watchers.Snapshot{Pods: watchers.NewPodLister(idx), PodIndex: idx}
}
