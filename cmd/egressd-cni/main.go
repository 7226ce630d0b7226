// Command egressd-cni is egressd's chained CNI plugin (CNI spec 0.3.0 to 1.1). Listed after the
// primary plugin in a conflist, on ADD it hands the new pod (namespace and name from CNI_ARGS,
// sandbox, prevResult's addresses and interfaces) to the node's egressd over a unix socket and
// returns only once egressd has programmed the pod (EgressFirewall, EgressQoS, EgressIP
// steering), so the pod's first packet is already under policy; for an EgressRouter's router
// pod, it then has egressd-cni-router, beside it, configure the router in the pod (macvlan,
// addresses, routes, nftables) from egressd's answer; then it returns prevResult unchanged.
// DEL tells egressd to forget the sandbox and always succeeds; CHECK asks egressd whether it
// holds the pod with prevResult's addresses; GC forwards the runtime's list of valid sandboxes;
// STATUS reports whether egressd answers.
//
// When egressd does not answer within "timeout", ADD, CHECK and STATUS fail (fail closed: the
// runtime retries the sandbox) unless the network config sets "failOpen": true (STATUS waits
// 5 s at most, and reports ready with failOpen whatever egressd says).
//
//	{"type": "egressd-cni", "socket": "/run/egressd/cni.sock", "timeout": "10s", "failOpen": false}
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	cniversion "github.com/containernetworking/cni/pkg/version"

	"github.com/egressd/egressd/internal/version"
	"github.com/egressd/egressd/nodeagent/cniserver/cniapi"
)

// defaultTimeout bounds a call when the config sets none: the kubelet's runtime calls are
// bounded too (minutes), and a sandbox that fails is retried.
const defaultTimeout = 10 * time.Second

// retryEvery is the pause between attempts to reach an egressd that does not answer (restarting).
const retryEvery = 50 * time.Millisecond

// netConf is the plugin's network configuration.
type netConf struct {
	types.PluginConf
	// Socket is egressd's unix socket (egressd --cni-socket).
	Socket string `json:"socket,omitempty"`
	// Timeout bounds each call, reaching egressd and waiting for it (a Go duration).
	Timeout string `json:"timeout,omitempty"`
	// FailOpen lets ADD, CHECK and STATUS succeed when egressd does not answer in time.
	FailOpen bool `json:"failOpen,omitempty"`

	timeout time.Duration
}

// k8sArgs are the CNI_ARGS a Kubernetes runtime passes.
type k8sArgs struct {
	types.CommonArgs
	K8S_POD_NAMESPACE          types.UnmarshallableString //nolint:revive // the runtime's names
	K8S_POD_NAME               types.UnmarshallableString //nolint:revive
	K8S_POD_INFRA_CONTAINER_ID types.UnmarshallableString //nolint:revive
	K8S_POD_UID                types.UnmarshallableString //nolint:revive
}

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{Add: cmdAdd, Del: cmdDel, Check: cmdCheck, GC: cmdGC, Status: cmdStatus},
		// 0.3.x and 0.4.0 too: many primary CNIs' conflists still say 0.3.1 (flannel, Calico),
		// and a chained plugin runs at the list's version.
		cniversion.PluginSupports("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"), "egressd-cni "+version.String()+": hands new pods to egressd before they run")
}

func parseConf(stdin []byte, needPrev bool) (*netConf, error) {
	c := &netConf{}
	if err := json.Unmarshal(stdin, c); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "egressd-cni: decode network config", err.Error())
	}
	if c.Socket == "" {
		c.Socket = cniapi.DefaultSocket
	}
	c.timeout = defaultTimeout
	if c.Timeout != "" {
		d, err := time.ParseDuration(c.Timeout)
		if err != nil || d <= 0 {
			return nil, types.NewError(types.ErrInvalidNetworkConfig, "egressd-cni: invalid timeout", fmt.Sprintf("%q: want a positive Go duration like 10s", c.Timeout))
		}
		c.timeout = d
	}
	if err := cniversion.ParsePrevResult(&c.PluginConf); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "egressd-cni: decode prevResult", err.Error())
	}
	if needPrev && c.PrevResult == nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, "egressd-cni: no prevResult",
			"egressd-cni is a chained plugin: list it after the plugin that creates the pod's interface")
	}
	return c, nil
}

// request is the call for egressd: the pod from CNI_ARGS, the sandbox, prevResult's addresses.
func request(args *skel.CmdArgs, c *netConf, strict bool) (*cniapi.Request, error) {
	var k k8sArgs
	k.IgnoreUnknown = true
	if err := types.LoadArgs(args.Args, &k); err != nil {
		return nil, types.NewError(types.ErrInvalidEnvironmentVariables, "egressd-cni: parse CNI_ARGS", err.Error())
	}
	req := &cniapi.Request{ContainerID: args.ContainerID, Netns: args.Netns, IfName: args.IfName,
		Namespace: string(k.K8S_POD_NAMESPACE), Name: string(k.K8S_POD_NAME), UID: string(k.K8S_POD_UID),
		Timeout: c.timeout - c.timeout/10} // egressd's answer "not in time" arrives before the plugin gives up (9/10, not overflowing)
	if strict && (req.Namespace == "" || req.Name == "") {
		return nil, types.NewError(types.ErrInvalidEnvironmentVariables, "egressd-cni: CNI_ARGS lack K8S_POD_NAMESPACE or K8S_POD_NAME",
			"egressd-cni serves Kubernetes pods: the runtime must pass the pod's namespace and name")
	}
	if c.PrevResult == nil {
		return req, nil
	}
	prev, err := current.NewResultFromResult(c.PrevResult)
	if err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "egressd-cni: convert prevResult", err.Error())
	}
	for _, i := range prev.Interfaces {
		req.Interfaces = append(req.Interfaces, cniapi.Interface{Name: i.Name, Mac: i.Mac, Sandbox: i.Sandbox})
	}
	for _, ip := range prev.IPs {
		a, ok := netip.AddrFromSlice(ip.Address.IP)
		if !ok {
			continue
		}
		ones, _ := ip.Address.Mask.Size()
		a = a.Unmap()
		x := cniapi.IP{Address: netip.PrefixFrom(a, ones)}
		if !x.Address.IsValid() {
			// An IPv4-mapped address in an IPv6 prefix (::ffff:10.0.0.5/120): sent invalid, the
			// address would be dropped, the pod unprogrammed. The address is what egressd needs.
			x.Address = netip.PrefixFrom(a, a.BitLen())
		}
		if ip.Interface != nil && *ip.Interface >= 0 && *ip.Interface < len(prev.Interfaces) {
			x.Interface = prev.Interfaces[*ip.Interface].Name
		}
		req.IPs = append(req.IPs, x)
	}
	return req, nil
}

// outcome applies fail-open to an egressd that does not answer, or not in time.
func outcome(err error, c *netConf, what string) error {
	var u unreachable
	var cerr *types.Error
	if c.FailOpen && errors.As(err, &cerr) && (cerr.Code == cniapi.CodeTryAgainLater || cerr.Code == cniapi.CodeProgramFailed) {
		fmt.Fprintf(os.Stderr, "egressd-cni: %s: %v; failOpen is set, going on\n", what, err)
		return nil
	}
	if errors.As(err, &u) {
		if c.FailOpen {
			fmt.Fprintf(os.Stderr, "egressd-cni: %s: %v; failOpen is set, going on without egressd\n", what, err)
			return nil
		}
		return types.NewError(types.ErrTryAgainLater, fmt.Sprintf("egressd-cni: %s: %v (fail closed; set failOpen in the plugin config to go on)", what, u.err),
			"socket "+c.Socket)
	}
	return err
}

func cmdAdd(args *skel.CmdArgs) error {
	c, err := parseConf(args.StdinData, true)
	if err != nil {
		return err
	}
	req, err := request(args, c, true)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	resp, err := exchange(ctx, c.Socket, "POST", cniapi.PathAdd, req)
	if err := outcome(err, c, "ADD"); err != nil {
		return err
	}
	if resp != nil && resp.Router != nil {
		// A time of its own: egressd may have answered near the ADD's deadline, and a helper
		// killed halfway would leave the router half configured and unreported.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), routerTimeout)
		defer cancel()
		if err := configureRouter(rctx, c, req, resp.Router); err != nil {
			return err
		}
	}
	return types.PrintResult(c.PrevResult, c.CNIVersion)
}

// configureRouter has RouterHelper apply an EgressRouter's configuration in the pod's
// namespace (the agent cannot enter it: it lacks CAP_SYS_ADMIN, which the runtime gives its
// plugins) and reports the outcome to egressd, which writes it into the EgressRouter's status.
// A router that could not be configured fails the ADD, whatever failOpen says: the pod would
// serve nothing.
func configureRouter(ctx context.Context, c *netConf, req *cniapi.Request, rc json.RawMessage) error {
	res := applyRouter(ctx, req, rc)
	res.ContainerID, res.Namespace, res.Name = req.ContainerID, req.Namespace, req.Name
	if rerr := call(ctx, c.Socket, "POST", cniapi.PathRouter, res); rerr != nil {
		fmt.Fprintf(os.Stderr, "egressd-cni: report the egress router's configuration: %v\n", rerr)
	}
	if res.Error != "" {
		return types.NewError(cniapi.CodeRouterFailed, "egressd-cni: egress router", res.Error)
	}
	return nil
}

// routerTimeout bounds configuring a router pod and reporting it, after egressd answered.
const routerTimeout = 10 * time.Second

// applyRouter runs RouterHelper from the directory the plugin was run from, where the DaemonSet
// installs both.
func applyRouter(ctx context.Context, req *cniapi.Request, rc json.RawMessage) cniapi.RouterResult {
	helper, err := routerHelper()
	if err != nil {
		return cniapi.RouterResult{Error: fmt.Sprintf("find %s: %v", cniapi.RouterHelper, err)}
	}
	in, err := json.Marshal(cniapi.RouterSetup{Netns: req.Netns, IfName: req.IfName, Config: rc})
	if err != nil {
		return cniapi.RouterResult{Error: fmt.Sprintf("the router setup: %v", err)}
	}
	var out, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, helper)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(in), &out, &stderr
	if err := cmd.Run(); err != nil {
		return cniapi.RouterResult{Error: fmt.Sprintf("%s: %v: %s", cmd.Path, err, strings.TrimSpace(string(truncate(stderr.Bytes()))))}
	}
	var res cniapi.RouterResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return cniapi.RouterResult{Error: fmt.Sprintf("%s's outcome %q: %v", cmd.Path, out.String(), err)}
	}
	return res
}

// routerHelper is RouterHelper beside the plugin as the runtime ran it (its absolute path, a
// symbolic link in the plugin directory maybe), else beside the file the plugin is.
func routerHelper() (string, error) {
	if filepath.IsAbs(os.Args[0]) {
		if p := filepath.Join(filepath.Dir(os.Args[0]), cniapi.RouterHelper); fileExists(p) {
			return p, nil
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(exe), cniapi.RouterHelper), nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// cmdDel always succeeds once the config parses: a pod being torn down must not be held by
// egressd, which forgets it from the API anyway.
func cmdDel(args *skel.CmdArgs) error {
	c, err := parseConf(args.StdinData, false)
	if err != nil {
		return err
	}
	req, err := request(args, c, false)
	if err != nil {
		req = &cniapi.Request{ContainerID: args.ContainerID}
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(c.timeout, 2*time.Second))
	defer cancel()
	if err := call(ctx, c.Socket, "POST", cniapi.PathDel, req); err != nil {
		fmt.Fprintf(os.Stderr, "egressd-cni: DEL: %v (ignored)\n", err)
	}
	return nil
}

func cmdCheck(args *skel.CmdArgs) error {
	c, err := parseConf(args.StdinData, true)
	if err != nil {
		return err
	}
	req, err := request(args, c, true)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	return outcome(call(ctx, c.Socket, "POST", cniapi.PathCheck, req), c, "CHECK")
}

func cmdGC(args *skel.CmdArgs) error {
	c, err := parseConf(args.StdinData, false)
	if err != nil {
		return err
	}
	gc := cniapi.GCRequest{Valid: []string{}}
	for _, a := range c.ValidAttachments {
		gc.Valid = append(gc.Valid, a.ContainerID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(c.timeout, 2*time.Second))
	defer cancel()
	if err := call(ctx, c.Socket, "POST", cniapi.PathGC, gc); err != nil {
		fmt.Fprintf(os.Stderr, "egressd-cni: GC: %v (ignored)\n", err)
	}
	return nil
}

func cmdStatus(args *skel.CmdArgs) error {
	c, err := parseConf(args.StdinData, false)
	if err != nil {
		return err
	}
	// Long enough to ride out an agent's restart (its socket is gone for a second or two): the
	// runtime's network, and so the Node, must not turn not ready for it.
	ctx, cancel := context.WithTimeout(context.Background(), min(c.timeout, statusWait))
	defer cancel()
	err = call(ctx, c.Socket, "GET", cniapi.PathStatus, nil)
	switch {
	case err == nil:
		return nil
	case c.FailOpen: // ADD goes on without egressd: the plugin can serve it
		fmt.Fprintf(os.Stderr, "egressd-cni: STATUS: %v; failOpen is set, ready\n", err)
		return nil
	}
	var u unreachable
	if errors.As(err, &u) {
		return types.NewError(cniapi.CodeNotAvailable, "egressd-cni: egressd does not answer", u.err.Error())
	}
	return err
}

// statusWait bounds STATUS's wait for egressd.
const statusWait = 5 * time.Second
