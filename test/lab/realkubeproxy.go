package lab

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/egressd/egressd/test/toolbuild"
)

// kubeProxyUser is the identity the default ClusterRoleBinding system:node-proxier grants
// kube-proxy's permissions to.
const kubeProxyUser = "system:kube-proxy"

// kubeProxyHealthz is where each node's kube-proxy serves its health: every node has its own
// loopback, so the default ports are free in each.
const kubeProxyHealthz = "127.0.0.1:10256"

// startRealKubeProxy runs kube-proxy in mode in every node's namespace, as its DaemonSet's
// hostNetwork pod would, through the node's API forwarder, and waits until each has programmed
// the Services (its healthz answers 200 after its first sync).
func (l *Lab) startRealKubeProxy(ctx context.Context, mode string) error {
	if mode != "iptables" && mode != "nftables" {
		return fmt.Errorf("kube-proxy mode %q: the lab runs iptables or nftables", mode)
	}
	dir, err := toolbuild.Kubernetes(l.opts.Log)
	if err != nil {
		return err
	}
	ruleset := []string{"nft", "list", "table", "ip", "kube-proxy"}
	if mode == "iptables" {
		ruleset = []string{"iptables", "-t", "nat", "-S", "KUBE-SERVICES"}
	}
	kubeconfig, err := l.CP.KubeconfigAt("https://"+apiForwardAddr, kubeProxyUser)
	if err != nil {
		return err
	}
	var clusterCIDRs []string
	for _, p := range ClusterCIDRs {
		clusterCIDRs = append(clusterCIDRs, p.String())
	}
	for _, n := range l.Nodes {
		if err := n.forwardAPIOnce(); err != nil {
			return err
		}
		// No conntrack sysctls: the table size is the machine's (a namespace cannot set it), and
		// the timeouts are left as they are.
		argv := []string{filepath.Join(dir, "kube-proxy"),
			"--kubeconfig", kubeconfig, "--hostname-override", n.Name, "--proxy-mode", mode,
			"--cluster-cidr", strings.Join(clusterCIDRs, ","),
			"--healthz-bind-address", kubeProxyHealthz, "--metrics-bind-address", "127.0.0.1:10249",
			"--conntrack-max-per-core", "0", "--conntrack-tcp-timeout-established", "0",
			"--conntrack-tcp-timeout-close-wait", "0", "-v", "2"}
		client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: n.Dial, DisableKeepAlives: true}}
		err := n.startDaemon(ctx, "kube-proxy", nil, argv, func() error {
			resp, err := client.Get("http://" + kubeProxyHealthz + "/healthz")
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("healthz: %s", resp.Status)
			}
			// What the mode programs, so that a test passing here ran with it.
			_, err = n.NS.Run(ruleset[0], ruleset[1:]...)
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}
