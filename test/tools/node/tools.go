//go:build tools

// Package tools pins the kubelet and kube-scheduler that test/node builds.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
