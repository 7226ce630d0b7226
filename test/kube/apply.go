// Package kube holds helpers that tests use to talk to the API server like a user with kubectl:
// create or update objects from YAML, whatever their kind, and wait for their fields.
package kube

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/egressd/egressd/test/poll"
)

// Client creates and updates arbitrary objects from YAML.
type Client struct {
	dyn    dynamic.Interface
	mapper meta.RESTMapper
}

// NewClient builds a Client for cfg.
func NewClient(cfg *rest.Config) (*Client, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Client{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))}, nil
}

// Decode parses a YAML document (one or more, separated by "---") into objects.
func Decode(doc string) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	for _, part := range strings.Split(doc, "\n---") {
		if strings.TrimSpace(strings.TrimPrefix(part, "---")) == "" {
			continue
		}
		var m map[string]any
		if err := yaml.Unmarshal([]byte(part), &m); err != nil {
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	return objs, nil
}

// Create creates obj; a namespaced object without a namespace goes to ns.
func (c *Client) Create(ctx context.Context, ns string, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	ri, err := c.resource(obj, ns)
	if err != nil {
		return nil, err
	}
	return ri.Create(ctx, obj, metav1.CreateOptions{})
}

// FieldManager is the field manager of the objects Apply writes.
const FieldManager = "egressd-test"

// Apply creates or updates, in order, every object of a YAML document, as `kubectl apply
// --server-side --force-conflicts` would: the objects end up as the document says, whether
// they existed or not, and fields the document no longer sets (that Apply had set) are
// removed. Status is left alone. It stops at the first error.
func (c *Client) Apply(ctx context.Context, ns, doc string) error {
	objs, err := Decode(doc)
	if err != nil {
		return err
	}
	for _, o := range objs {
		ri, err := c.resource(o, ns)
		if err != nil {
			return fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
		}
		if _, err := ri.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
			return fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	return nil
}

func (c *Client) resource(obj *unstructured.Unstructured, ns string) (dynamic.ResourceInterface, error) {
	gvk := obj.GroupVersionKind()
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("no resource for %s: %w", gvk, err)
	}
	if m.Scope.Name() != meta.RESTScopeNameNamespace {
		return c.dyn.Resource(m.Resource), nil
	}
	if obj.GetNamespace() == "" {
		obj.SetNamespace(ns)
	}
	return c.dyn.Resource(m.Resource).Namespace(obj.GetNamespace()), nil
}

// Get fetches the object apiVersion/kind ns/name (ns empty for cluster-scoped kinds).
func (c *Client) Get(ctx context.Context, apiVersion, kind, ns, name string) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	u.SetNamespace(ns)
	ri, err := c.resource(u, ns)
	if err != nil {
		return nil, err
	}
	return ri.Get(ctx, name, metav1.GetOptions{})
}

// WaitField waits until the field at a dotted path (e.g. "status.status") of the object equals
// want (want "" also accepts an absent field), as a user watching `kubectl get -o jsonpath`
// would. On timeout the error says what the field last held.
func (c *Client) WaitField(ctx context.Context, apiVersion, kind, ns, name, path, want string, timeout time.Duration) error {
	return poll.Until(ctx, fmt.Sprintf("%s %s/%s %s = %q", kind, ns, name, path, want), timeout, func() error {
		obj, err := c.Get(ctx, apiVersion, kind, ns, name)
		if err != nil {
			return err
		}
		v, found, _ := unstructured.NestedFieldNoCopy(obj.Object, strings.Split(path, ".")...)
		if !found && want == "" {
			return nil
		}
		if !found {
			return fmt.Errorf("%s unset", path)
		}
		if got := fmt.Sprint(v); got != want {
			return fmt.Errorf("%s = %q", path, got)
		}
		return nil
	})
}

// UpdateStatus replaces the status of obj (with its resourceVersion).
func (c *Client) UpdateStatus(ctx context.Context, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	ri, err := c.resource(obj, obj.GetNamespace())
	if err != nil {
		return nil, err
	}
	return ri.UpdateStatus(ctx, obj, metav1.UpdateOptions{})
}

// Delete deletes the object apiVersion/kind ns/name.
func (c *Client) Delete(ctx context.Context, apiVersion, kind, ns, name string) error {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	ri, err := c.resource(u, ns)
	if err != nil {
		return err
	}
	return ri.Delete(ctx, name, metav1.DeleteOptions{})
}
