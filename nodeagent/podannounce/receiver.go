package podannounce

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/nodeagent/egressip"
	"github.com/egressd/egressd/watchers"
)

// Store takes another node's pod and returns once a sync that included it was applied,
// saying whether this node SNATs it (nodeagent/cniserver.Store).
type Store interface {
	AnnounceRemote(ctx context.Context, pod *corev1.Pod, ips []netip.Addr) (bool, error)
}

// Receiver serves the announcements of other nodes' agents.
type Receiver struct {
	Snapshot *watchers.Snapshot
	Store    Store
	Metrics  *Metrics
	Log      *slog.Logger
}

// Register adds the service to a gRPC server (the agent's egress health server).
func (r *Receiver) Register(s grpc.ServiceRegistrar) { s.RegisterService(&serviceDesc, r) }

func (r *Receiver) announce(ctx context.Context, req *Request) (*Reply, error) {
	pod, ips, err := r.validate(ctx, req)
	if err != nil {
		r.Metrics.received("denied")
		r.Log.Info("pod announcement refused", "pod", req.Namespace+"/"+req.Name, "node", req.Node, "err", err)
		return nil, err
	}
	served, err := r.Store.AnnounceRemote(ctx, pod, ips)
	if err != nil {
		r.Metrics.received("failed")
		return nil, status.Errorf(codes.DeadlineExceeded, "pod %s/%s: not programmed in time: %v", req.Namespace, req.Name, err)
	}
	r.Metrics.received(result(served))
	r.Log.Debug("pod announced", "pod", req.Namespace+"/"+req.Name, "node", req.Node, "ips", ips, "served", served)
	return &Reply{Served: served}, nil
}

// validate checks the announcement against this node's view of the API: the pod runs on the
// announcing node, the call comes from an address of that node, and the addresses are in its
// pod networks (when the Node has spec.podCIDRs).
func (r *Receiver) validate(ctx context.Context, req *Request) (*corev1.Pod, []netip.Addr, error) {
	pod, err := r.Snapshot.Pods.Pods(req.Namespace).Get(req.Name)
	if err != nil {
		return nil, nil, status.Errorf(codes.NotFound, "pod %s/%s: %v", req.Namespace, req.Name, err)
	}
	if pod.Spec.NodeName != req.Node || req.Node == "" {
		return nil, nil, status.Errorf(codes.PermissionDenied, "pod %s/%s runs on node %q, not %q", req.Namespace, req.Name, pod.Spec.NodeName, req.Node)
	}
	node, err := r.Snapshot.Nodes.Get(req.Node)
	if err != nil {
		return nil, nil, status.Errorf(codes.NotFound, "node %s: %v", req.Node, err)
	}
	from := callerAddr(ctx)
	if !slices.Contains(nodeAddresses(node), from) {
		return nil, nil, status.Errorf(codes.PermissionDenied, "announcement from %v, not an address of node %s", from, req.Node)
	}
	var cidrs []netip.Prefix
	for _, c := range node.Spec.PodCIDRs {
		if p, err := netip.ParsePrefix(c); err == nil {
			cidrs = append(cidrs, p)
		}
	}
	var ips []netip.Addr
	for _, s := range req.IPs {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, nil, status.Errorf(codes.InvalidArgument, "address %q: %v", s, err)
		}
		if len(cidrs) > 0 && !slices.ContainsFunc(cidrs, func(p netip.Prefix) bool { return p.Contains(a) }) {
			return nil, nil, status.Errorf(codes.PermissionDenied, "address %s is in no pod network of node %s %v", a, req.Node, cidrs)
		}
		ips = append(ips, a)
	}
	if len(ips) == 0 {
		return nil, nil, status.Error(codes.InvalidArgument, "no address")
	}
	return pod, ips, nil
}

// callerAddr is the address the call came from.
func callerAddr(ctx context.Context) netip.Addr {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return netip.Addr{}
	}
	if tcp, ok := p.Addr.(*net.TCPAddr); ok {
		return tcp.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// nodeAddresses are a node's host addresses and its primary interface's.
func nodeAddresses(n *corev1.Node) []netip.Addr {
	out := cluster.HostAddresses(n)
	if p, err := egressip.ParsePrimaryIfAddr(n.Annotations[egressip.PrimaryIfAddrAnnotation]); err == nil {
		for _, a := range []netip.Prefix{p.V4, p.V6} {
			if a.IsValid() {
				out = append(out, a.Addr())
			}
		}
	}
	for i := range out {
		out[i] = out[i].Unmap()
	}
	return out
}

func result(served bool) string {
	if served {
		return "served"
	}
	return "not_served"
}
