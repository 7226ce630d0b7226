package egressrouter

import (
	"context"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"github.com/egressd/egressd/api/generated/clientset/versioned"
	netopv1 "github.com/egressd/egressd/api/networkoperator/v1"
	"github.com/egressd/egressd/dataplane/router"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers"
)

// Node is this node's side: it compiles the configuration a router pod's CNI ADD applies, and
// reports the outcome in the EgressRouter's conditions (field manager egressd-node-<node>) and,
// on failure, in a Warning event.
type Node struct {
	Node     string
	Snapshot *watchers.Snapshot
	// Networks are the cluster networks of the flags (cluster.Networks completes them).
	Networks cluster.NetworkFlags
	Client   versioned.Interface
	Recorder record.EventRecorder
	Log      *slog.Logger
}

// Config is the router configuration of pod, nil if it is not a router pod (labelled
// app: egress-router-cni and controlled by an EgressRouter). A router pod whose EgressRouter is
// gone, or does not compile, is an error (its ADD fails; an invalid spec is reported).
func (n *Node) Config(ctx context.Context, pod *watchers.Pod) (*router.Config, error) {
	ref, ok := ownerOf(pod)
	if !ok {
		return nil, nil
	}
	er, err := n.Snapshot.EgressRouters.EgressRouters(pod.Namespace).Get(ref.Name)
	if err != nil || er.UID != ref.UID { // not in this agent's cache yet: ask the API server
		er, err = n.Client.NetworkOperatorV1().EgressRouters(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	}
	if err == nil && er.UID != ref.UID {
		err = apierrors.NewNotFound(netopv1.Resource("egressrouters"), ref.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("router pod %s/%s: EgressRouter %s: %w", pod.Namespace, pod.Name, ref.Name, err)
	}
	c, err := compile(er, cluster.Networks(n.Snapshot, n.Networks))
	if err != nil {
		err = fmt.Errorf("EgressRouter %s/%s: %w", er.Namespace, er.Name, err)
		n.report(ctx, er, pod, "", err)
		return nil, err
	}
	return c, nil
}

// Configured reports the outcome of applying the router pod's configuration on master.
func (n *Node) Configured(ctx context.Context, pod *watchers.Pod, master string, failure error) {
	ref, ok := ownerOf(pod)
	if !ok {
		return
	}
	er, err := n.Client.NetworkOperatorV1().EgressRouters(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil || er.UID != ref.UID {
		return // gone: nothing to report on
	}
	n.report(ctx, er, pod, master, failure)
}

func (n *Node) report(ctx context.Context, er *netopv1.EgressRouter, pod *watchers.Pod, master string, failure error) {
	desc := ""
	if failure == nil {
		c, err := compile(er, nil)
		if err != nil {
			failure = err
		} else {
			desc = served(c, master)
		}
	}
	if failure != nil {
		n.Log.Error("egress router not configured", "object", "EgressRouter "+er.Namespace+"/"+er.Name, "pod", pod.Name, "err", failure)
		n.Recorder.Eventf(er, corev1.EventTypeWarning, reasonConfigFailed, "router pod %s on node %s: %v", pod.Name, n.Node, failure)
	} else {
		n.Log.Info("egress router configured", "object", "EgressRouter "+er.Namespace+"/"+er.Name, "pod", pod.Name, "master", master)
	}
	if err := forConfiguration(pod.Name, n.Node, desc, failure).write(ctx, n.Client, er, "egressd-node-"+n.Node); err != nil {
		n.Log.Error("egress router status", "err", err)
	}
}
