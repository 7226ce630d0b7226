package lab

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/egressd/egressd/nodeagent/leader"
	"github.com/egressd/egressd/nodeagent/podannounce"
	"github.com/egressd/egressd/test/agent"
	"github.com/egressd/egressd/test/kube"
)

// apiForwardAddr is where the API server appears inside every node namespace, as the in-cluster
// address would for a hostNetwork pod.
const apiForwardAddr = "127.0.0.1:6443"

// agentUser is the identity of the agents: the DaemonSet's service account, with the RBAC of
// deploy/rbac.yaml; controllerUser the controller's, with deploy/controller-rbac.yaml.
const (
	agentUser      = kube.DeployedAgent
	controllerUser = kube.DeployedController
)

// LeaderNamespace is the namespace of the lab's leader-election Lease.
func (l *Lab) LeaderNamespace() string { return "egressd-" + l.ID }

// StartAgents forwards the API server into every node and starts egressd there, and egressd
// controller on the nodes of ControllerNodes.
func (l *Lab) StartAgents(ctx context.Context) error {
	if err := l.PrepareAgents(ctx); err != nil {
		return err
	}
	for _, n := range l.Nodes {
		if n.Kubelet {
			continue // its agent is the DaemonSet's pod
		}
		if err := n.StartAgent(ctx); err != nil {
			return err
		}
	}
	for _, i := range l.controllerNodes() {
		if err := l.Nodes[i].StartController(ctx); err != nil {
			return err
		}
	}
	return nil
}

// PrepareAgents does what the agents and controllers need before they start (their RBAC,
// policies and Lease namespace, every node's API forwarder), for a caller that starts them
// itself (Node.StartAgent, Node.StartController).
func (l *Lab) PrepareAgents(ctx context.Context) error {
	ns := l.LeaderNamespace()
	if _, err := l.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	l.onClose(func() { _ = l.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	for file, user := range map[string]string{"rbac.yaml": agentUser, "controller-rbac.yaml": controllerUser} {
		cleanup, err := kube.GrantAgentRBAC(ctx, l.Client, filepath.Join(repoRoot(), "deploy", file), ns, user)
		l.onClose(cleanup)
		if err != nil {
			return err
		}
	}
	// The controller's Lease requests in the leader-election priority level, as shipped.
	removeSchema, err := kube.InstallLeaseFlowSchema(ctx, l.CP.Config, filepath.Join(repoRoot(), "deploy", "controller-flowschema.yaml"), ns, l.ID)
	if removeSchema != nil {
		l.onClose(removeSchema)
	}
	if err != nil {
		return err
	}
	// The controller's pod policy as shipped; not the node identity ones: the agents' client
	// certificates cannot carry the node-name claim of a pod-bound token (the real node's
	// DaemonSet runs under them).
	uninstall, err := kube.InstallPolicies(ctx, l.CP.Config, filepath.Join(repoRoot(), "deploy", "router-pod-policy.yaml"),
		map[string]string{kube.DeployedController: controllerUser}, l.ID)
	if uninstall != nil {
		l.onClose(uninstall)
	}
	if err != nil {
		return err
	}
	for _, n := range l.Nodes {
		if n.Kubelet {
			continue
		}
		if err := n.forwardAPIOnce(); err != nil {
			return err
		}
	}
	return nil
}

// readyTimeout is Options.ReadyTimeout or its default.
func (l *Lab) readyTimeout() time.Duration {
	if l.opts.ReadyTimeout > 0 {
		return l.opts.ReadyTimeout
	}
	return time.Minute
}

// controllerNodes are ControllerNodes, or the first node without a kubelet.
func (l *Lab) controllerNodes() []int {
	if l.opts.ControllerNodes != nil {
		return l.opts.ControllerNodes
	}
	for i, n := range l.Nodes {
		if !n.Kubelet {
			return []int{i}
		}
	}
	return nil
}

// StartController starts a replica of egressd controller inside the node's namespace (whose
// API forwarder it uses: cutting the node off cuts the replica off), named controller@<node>,
// and waits until it is ready (caches synced; leading or not).
func (n *Node) StartController(ctx context.Context) error {
	kubeconfig, err := n.lab.CP.KubeconfigAt("https://"+apiForwardAddr, controllerUser)
	if err != nil {
		return err
	}
	bin, err := agent.Command("egressd")
	if err != nil {
		return err
	}
	p, err := n.launchReady(ctx, func() (*agent.Process, error) {
		return agent.LaunchController(agent.ControllerOptions{
			Binary: bin, Name: "controller@" + n.Name, LogDir: n.lab.Dir, Kubeconfig: kubeconfig,
			LeaderNamespace: n.lab.LeaderNamespace(), Wrap: []string{"nsenter", "--net=" + n.NS.Path()}, Dial: n.Dial,
			Args: append([]string{"--node-name", n.Name}, n.lab.opts.ControllerArgs...),
		})
	})
	if p != nil {
		n.Controller = p
	}
	return err
}

// launchReady launches a process in the node and waits until it is ready. Its loopback ports
// are picked in the test's namespace but bound in the node's, where the agent's and
// controller's own connections to the API forwarder take ephemeral ports from the same range:
// a process that lost that race exits at once, and is launched again on other ports.
func (n *Node) launchReady(ctx context.Context, launch func() (*agent.Process, error)) (*agent.Process, error) {
	for attempt := 1; ; attempt++ {
		p, err := launch()
		if err != nil {
			return nil, err
		}
		rctx, cancel := context.WithTimeout(ctx, n.lab.readyTimeout())
		err = p.WaitReady(rctx)
		cancel()
		if err == nil {
			return p, nil
		}
		log := p.Log()
		select {
		case <-p.Exited():
			if attempt < 3 && strings.Contains(log, "bind: address already in use") {
				continue
			}
		default:
		}
		return p, fmt.Errorf("%w\n%s", err, tail(log, 40))
	}
}

// apiForwarder relays connections from inside a node to the API server; CutAPI cuts it.
type apiForwarder struct {
	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]bool
}

// ForwardAPI listens on addr inside the node and relays to the API server; CutAPI cuts all of
// a node's forwarders.
func (n *Node) ForwardAPI(addr string) error {
	u, err := url.Parse(n.lab.CP.Server)
	if err != nil {
		return err
	}
	var ln net.Listener
	if err := n.NS.Do(func() error {
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		return fmt.Errorf("API forwarder in %s: %w", n.Name, err)
	}
	if n.api == nil {
		n.api = &apiForwarder{conns: map[net.Conn]bool{}}
	}
	f := n.api
	n.lab.onClose(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			if f.cut {
				f.mu.Unlock()
				c.Close()
				continue
			}
			f.conns[c] = true
			f.mu.Unlock()
			go func() {
				relay(c, u.Host, f.track)
				f.mu.Lock()
				delete(f.conns, c)
				f.mu.Unlock()
			}()
		}
	}()
	return nil
}

// forwardAPIOnce starts the node's forwarder at apiForwardAddr, where the node's programs
// (agent, controller, kube-proxy, flanneld) reach the API server, unless it runs.
func (n *Node) forwardAPIOnce() error {
	if n.apiForwarded {
		return nil
	}
	if err := n.ForwardAPI(apiForwardAddr); err != nil {
		return err
	}
	n.apiForwarded = true
	return nil
}

// CutAPI cuts the node off the API server (cut) or restores its access: while cut, the node's
// connections to the API server are closed and new ones are closed at once, as when the node's
// network is gone (the lab reaches the API server through a relay, not through the fabric, so
// taking the fabric link down alone leaves the agent connected).
func (n *Node) CutAPI(cut bool) {
	f := n.api
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cut = cut
	if cut {
		for c := range f.conns {
			c.Close()
		}
	}
}

// track registers the upstream side of a relayed connection, so that CutAPI closes it too.
func (f *apiForwarder) track(up net.Conn) func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cut {
		up.Close()
	}
	f.conns[up] = true
	return func() {
		f.mu.Lock()
		delete(f.conns, up)
		f.mu.Unlock()
	}
}

// relay dials from the caller's (root) namespace: goroutines never run in a lab namespace.
func relay(c net.Conn, target string, track func(net.Conn) func()) {
	defer c.Close()
	up, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		return
	}
	defer up.Close()
	defer track(up)()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); up.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); c.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	<-done
	<-done
}

// StartAgent starts egressd inside the node's namespace, as a hostNetwork DaemonSet pod, and
// waits until it is ready.
func (n *Node) StartAgent(ctx context.Context) error {
	kubeconfig, err := n.lab.CP.KubeconfigAt("https://"+apiForwardAddr, agentUser)
	if err != nil {
		return err
	}
	n.agentStarted.Store(true)
	// No cluster networks on the command line: the agents discover them (the nodes' podCIDRs,
	// the API server's ServiceCIDR), as in the shipped DaemonSet.
	token, err := n.announceToken(ctx)
	if err != nil {
		return fmt.Errorf("node %s: the token that authenticates its pod announcements: %w", n.Name, err)
	}
	if err := os.MkdirAll(filepath.Dir(n.CNISocket()), 0o755); err != nil {
		return fmt.Errorf("node %s: its agent's state directory: %w", n.Name, err)
	}
	args := []string{"--cni-socket", n.CNISocket(), "--pod-announce-token-file", token, "--cni-cache-dir", n.CNICacheDir(),
		"--cilium-node-config", n.ciliumNodeConfig()}
	if n.lab.opts.InstallCNI {
		plugin, err := egressdCNI()
		if err != nil {
			return err
		}
		args = append(args, "--cni-conf-dir", n.CNIConfDir(), "--cni-bin-dir", n.CNIBinDir(), "--cni-plugin-binary", plugin)
	}
	wrap := n.lab.opts.AgentWrap
	if wrap == nil {
		wrap = DefaultAgentWrap
	}
	bin, err := agent.Command("egressd")
	if err != nil {
		return err
	}
	p, err := n.launchReady(ctx, func() (*agent.Process, error) {
		return agent.Launch(agent.Options{
			Binary: bin, LogDir: n.lab.Dir, Node: n.Name, Kubeconfig: kubeconfig,
			PinRoot: PinRoot(n.lab.ID, n.Name),
			Wrap:    append([]string{"nsenter", "--net=" + n.NS.Path()}, wrap...), Dial: n.Dial,
			Args: append(args, n.lab.opts.AgentArgs...),
		})
	})
	if p != nil {
		n.Agent = p
	}
	return err
}

// LeaderNode is the node whose controller replica holds the Lease (nil while none does).
func (l *Lab) LeaderNode(ctx context.Context) *Node {
	lease, err := l.Client.CoordinationV1().Leases(l.LeaderNamespace()).Get(ctx, leader.LeaseName, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil {
		return nil
	}
	for _, n := range l.Nodes {
		if *lease.Spec.HolderIdentity == "controller@"+n.Name {
			return n
		}
	}
	return nil
}

// announceToken writes the node's token for its pod announcements, as the DaemonSet projects
// it: a token of the agents' ServiceAccount for podannounce.Audience, bound to a Pod of the
// node (so it carries the node-name claim); the Pod only stands for the DaemonSet's (no kubelet
// runs it). It returns the file's path; an agent started again reuses it (valid an hour).
func (n *Node) announceToken(ctx context.Context) (string, error) {
	path := filepath.Join(n.lab.Dir, n.Name+".announce-token")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	c := n.lab.Client
	ns, sa, _ := strings.Cut(strings.TrimPrefix(agentUser, "system:serviceaccount:"), ":")
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	if _, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	// The kubelet stand-in leaves it alone (it would run it in a sandbox of its own).
	pod, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "egressd-" + n.lab.ID + "-" + n.Name,
		Annotations: map[string]string{labPodAnnotation: "true"}},
		Spec: corev1.PodSpec{NodeName: n.Name, ServiceAccountName: sa, AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "egressd", Image: "ghcr.io/egressd/egressd:lab"}}}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	n.lab.onClose(func() { _ = c.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{}) })
	tr, err := c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences: []string{podannounce.Audience}, ExpirationSeconds: ptr.To[int64](3600),
		BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return path, os.WriteFile(path, []byte(tr.Status.Token), 0o600)
}
