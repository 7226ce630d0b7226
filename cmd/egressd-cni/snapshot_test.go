package main

import (
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/egressd/egressd/watchers"
)

func emptySnapshot() *watchers.Snapshot {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	return &watchers.Snapshot{Pods: corelisters.NewPodLister(idx), PodIndex: idx}
}
