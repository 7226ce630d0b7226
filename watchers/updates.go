package watchers

import (
	"maps"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	cloudv1 "github.com/egressd/egressd/api/cloudnetwork/v1"
	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	netopv1 "github.com/egressd/egressd/api/networkoperator/v1"
)

// statusOnly says whether an update changed nothing but the status (and bookkeeping) of one
// of the egress API objects: same UID, generation, labels and annotations. Core objects always
// count: pod IPs and readiness, node addresses live in their status.
func statusOnly(old, new any) bool {
	o, ok1 := old.(metav1.Object)
	n, ok2 := new.(metav1.Object)
	if !ok1 || !ok2 || !egressAPI(new) {
		return false
	}
	// An EgressService's status.host is what every node programs from (the leader's election).
	if o, ok := old.(*ovnv1.EgressService); ok {
		if n, ok := new.(*ovnv1.EgressService); ok && o.Status.Host != n.Status.Host {
			return false
		}
	}
	// Another UID is another object: deleted and created again while the watch was down, which
	// a relist delivers as an update (both often at generation 1).
	return o.GetUID() == n.GetUID() && o.GetGeneration() == n.GetGeneration() && maps.Equal(o.GetLabels(), n.GetLabels()) &&
		maps.Equal(o.GetAnnotations(), n.GetAnnotations())
}

// unchanged says whether an update changed nothing the cache keeps of an object: what changed
// was dropped by the transform (a pod's container statuses, a node's heartbeat, the status of
// an EgressFirewall), or a relist delivered the object again. Without this, each kubelet status
// write of a pod a node caches made the node sync.
func unchanged(old, new any) bool {
	o, ok := old.(runtime.Object)
	if !ok {
		return false
	}
	c := o.DeepCopyObject()
	cm, ok1 := c.(metav1.Object)
	n, ok2 := new.(metav1.Object)
	if !ok1 || !ok2 {
		return false
	}
	cm.SetResourceVersion(n.GetResourceVersion())
	return equality.Semantic.DeepEqual(c, new)
}

func egressAPI(obj any) bool {
	switch obj.(type) {
	case *ovnv1.EgressFirewall, *ovnv1.EgressQoS, *ovnv1.EgressIP, *ovnv1.AdminPolicyBasedExternalRoute,
		*ovnv1.EgressService, *netopv1.EgressRouter, *cloudv1.CloudPrivateIPConfig:
		return true
	}
	return false
}
