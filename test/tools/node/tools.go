//go:build tools

// Package tools pins the kubelet, kube-scheduler and kube-proxy that test/node and the lab build.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
