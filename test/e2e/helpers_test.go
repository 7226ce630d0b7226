package e2e

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/egressd/egressd/test/kube"
)

var kubeDecode = kube.Decode

func unstructuredStrings(obj map[string]any, path ...string) ([]string, bool, error) {
	return unstructured.NestedStringSlice(obj, path...)
}

func unstructuredSlice(obj map[string]any, path ...string) ([]any, bool, error) {
	return unstructured.NestedSlice(obj, path...)
}
