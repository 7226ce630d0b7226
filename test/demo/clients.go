package main

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/egressd/egressd/test/controlplane"
	"github.com/egressd/egressd/test/kube"
)

type clients struct {
	k   kubernetes.Interface
	dyn *kube.Client
}

func kubeClient(cp *controlplane.ControlPlane) (*clients, error) {
	k, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		return nil, err
	}
	dyn, err := kube.NewClient(cp.Config)
	if err != nil {
		return nil, err
	}
	return &clients{k: k, dyn: dyn}, nil
}

func nsObject(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}
