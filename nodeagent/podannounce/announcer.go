package podannounce

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Announcer announces this node's new pods to the agents of their egress nodes.
type Announcer struct {
	// Node is this node's name; Port the egress health port of every agent.
	Node string
	Port uint16
	// TokenFile holds this agent's pod-bound token for Audience, sent with every announcement.
	TokenFile string
	Metrics   *Metrics
	Log       *slog.Logger

	mu    sync.Mutex
	conns map[netip.Addr]*grpc.ClientConn
}

// Announce tells the agents at every address of to about the pod, in parallel, and returns once
// all answered or ctx ended. Failures are logged and counted: the ADD goes on (the egress node
// drops the pod's packets until it learns the pod from the API).
func (a *Announcer) Announce(ctx context.Context, to []netip.Addr, namespace, name string, ips []netip.Addr) {
	req := &Request{Namespace: namespace, Name: name, Node: a.Node}
	for _, ip := range ips {
		req.IPs = append(req.IPs, ip.String())
	}
	var wg sync.WaitGroup
	for _, addr := range to {
		wg.Go(func() {
			start := time.Now()
			var reply Reply
			err := a.conn(addr).Invoke(ctx, method, req, &reply, grpc.CallContentSubtype(codecName))
			if err != nil {
				a.Metrics.sent("failed", time.Since(start))
				a.Log.Info("pod announcement failed: the egress node drops its packets until it learns the pod from the API",
					"pod", namespace+"/"+name, "egressNode", addr, "err", err)
				return
			}
			a.Metrics.sent(result(reply.Served), time.Since(start))
			a.Log.Debug("pod announced", "pod", namespace+"/"+name, "egressNode", addr, "served", reply.Served, "took", time.Since(start))
		})
	}
	wg.Wait()
}

// conn is the connection to an agent, made once (gRPC reconnects it as needed).
func (a *Announcer) conn(addr netip.Addr) *grpc.ClientConn {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c := a.conns[addr]; c != nil {
		return c
	}
	if a.conns == nil {
		a.conns = map[netip.Addr]*grpc.ClientConn{}
	}
	// NewClient fails only on a malformed target, which an address and port cannot make.
	c, _ := grpc.NewClient(netip.AddrPortFrom(addr, a.Port).String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(tokenFile(a.TokenFile)))
	a.conns[addr] = c
	return c
}

// Close closes the connections.
func (a *Announcer) Close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range a.conns {
		c.Close()
	}
	a.conns = nil
}
