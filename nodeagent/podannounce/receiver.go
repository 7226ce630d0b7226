package podannounce

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers"
)

// Store takes another node's pod and returns once a sync that included it was applied,
// saying whether this node SNATs it (nodeagent/cniserver.Store).
type Store interface {
	AnnounceRemote(ctx context.Context, pod *watchers.Pod, ips []netip.Addr) (bool, error)
}

// Receiver serves the announcements of other nodes' agents.
type Receiver struct {
	// Auth names the node of the sender's token; the announcement must be of that node's pod.
	Auth     Authenticator
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
// pod networks (when the Node has spec.podCIDRs), one per family, held by no other pod and no
// node, and those the Pod object shows once it shows any: an announcement only stands in for
// the Pod's status until the kubelet writes it, and must not lend a pod another's address (it
// would leave with the other's egress IP) nor give it a junk one.
func (r *Receiver) validate(ctx context.Context, req *Request) (*watchers.Pod, []netip.Addr, error) {
	sender, err := r.Auth.Node(ctx, bearer(ctx))
	if err != nil {
		return nil, nil, status.Errorf(codes.Unauthenticated, "announcement of pod %s/%s: %v", req.Namespace, req.Name, err)
	}
	if sender != req.Node {
		return nil, nil, status.Errorf(codes.PermissionDenied, "the token of node %s announces a pod of node %q", sender, req.Node)
	}
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
		if a.Zone() != "" {
			// No pod address has one; with it the address escapes the checks below (the pods'
			// index, the nodes' addresses, a prefix's Contains), yet is programmed as without.
			return nil, nil, status.Errorf(codes.InvalidArgument, "address %q: a pod address has no zone", s)
		}
		a = a.Unmap()
		if slices.ContainsFunc(ips, func(b netip.Addr) bool { return b.Is4() == a.Is4() }) {
			return nil, nil, status.Errorf(codes.InvalidArgument, "more than one address of a family: %v", req.IPs)
		}
		if len(cidrs) > 0 && !slices.ContainsFunc(cidrs, func(p netip.Prefix) bool { return p.Contains(a) }) {
			return nil, nil, status.Errorf(codes.PermissionDenied, "address %s is in no pod network of node %s %v", a, req.Node, cidrs)
		}
		if err := r.unclaimed(pod, a); err != nil {
			return nil, nil, err
		}
		ips = append(ips, a)
	}
	if len(ips) == 0 {
		return nil, nil, status.Error(codes.InvalidArgument, "no address")
	}
	if shown := podIPs(pod); len(shown) > 0 && !slices.Equal(sorted(shown), sorted(ips)) {
		return nil, nil, status.Errorf(codes.PermissionDenied, "pod %s/%s shows addresses %v, not %v", req.Namespace, req.Name, shown, ips)
	}
	return pod, ips, nil
}

// unclaimed refuses an address another pod's status shows (a pod that has not finished) or
// a node holds. The pods looked at are those the agent caches: its node's own and the other
// nodes' pods it serves (watchers.NodePods), which are the only ones whose traffic reaches it:
// an address lent from any other pod changes nothing this node does to that pod's packets.
func (r *Receiver) unclaimed(pod *watchers.Pod, a netip.Addr) error {
	holders, err := r.Snapshot.PodIndex.ByIndex(watchers.PodsByIP, a.String())
	if err != nil {
		return status.Errorf(codes.Internal, "pods by address: %v", err)
	}
	for _, o := range holders {
		p := o.(*watchers.Pod)
		if p.UID != pod.UID && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			return status.Errorf(codes.PermissionDenied, "address %s is pod %s/%s's", a, p.Namespace, p.Name)
		}
	}
	nodes, err := r.Snapshot.Nodes.List(labels.Everything())
	if err != nil {
		return status.Errorf(codes.Internal, "nodes: %v", err)
	}
	for _, n := range nodes {
		if slices.Contains(nodeAddresses(n), a) {
			return status.Errorf(codes.PermissionDenied, "address %s is node %s's", a, n.Name)
		}
	}
	return nil
}

// podIPs are the addresses the Pod's status shows.
func podIPs(p *watchers.Pod) []netip.Addr {
	var out []netip.Addr
	for _, ip := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil {
			out = append(out, a.Unmap())
		}
	}
	return out
}

func sorted(a []netip.Addr) []netip.Addr {
	s := slices.Clone(a)
	slices.SortFunc(s, func(x, y netip.Addr) int { return x.Compare(y) })
	return s
}

// bearer is the call's bearer token ("" for none).
func bearer(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if t, ok := strings.CutPrefix(v, "Bearer "); ok {
			return t
		}
	}
	return ""
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
	if p, err := cluster.ParsePrimaryIfAddr(n.Annotations[cluster.PrimaryIfAddrAnnotation]); err == nil {
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
