package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	flag "github.com/spf13/pflag"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/classifier"
	"github.com/egressd/egressd/dataplane/routing"
	"github.com/egressd/egressd/dataplane/rpfilter"
	"github.com/egressd/egressd/dataplane/tunnel"
	"github.com/egressd/egressd/internal/pinroot"
	"github.com/egressd/egressd/nodeagent"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/nodeagent/cniserver/cniapi"
	"github.com/egressd/egressd/nodeagent/podannounce"
	"github.com/egressd/egressd/nodeagent/reachability"
	"github.com/egressd/egressd/watchers/dnsnames"
)

// config is the agent's command line.
type config struct {
	kubeconfig       string
	apiRate          apiRate
	nodeName         string
	bpfPinRoot       string
	profiling        bool
	profilingBind    string
	metricsAuth      bool
	metricsAddr      string
	healthAddr       string
	reachabilityAddr string
	clusterCIDRs     prefixList
	serviceCIDRs     prefixList
	debounce         time.Duration
	resync           time.Duration
	dnsServers       []string
	dnsMinTTL        time.Duration
	dnsAnswersQueue  uint16
	dnsPerNamespace  int
	legacyGateways   bool
	gatewayBFD       time.Duration
	gatewayBFDMult   uint8
	addressLifetime  time.Duration
	aclLogRate       uint
	verbosity        int
	logFormat        string
	markMask         uint32
	routing          routing.Config
	healthPort       uint16
	announceToken    string
	announceIdentity string
	steering         nodeagent.SteeringMode
	tunnel           tunnel.Config
	cniSocket        string
	cniCacheDir      string
	cniBinary        string
	cniBinDir        string
	cniConfDir       string
	cniFailOpen      bool
	// cniDaemonSet is the agent's own DaemonSet, in podNamespace (unchain.go).
	cniDaemonSet, podNamespace string
	loosenRPFilter             bool
	ciliumNodeConfig           string
}

// prefixList is a comma-separated list of CIDRs, v4 and/or v6.
type prefixList []netip.Prefix

func (p *prefixList) String() string {
	s := make([]string, len(*p))
	for i, x := range *p {
		s[i] = x.String()
	}
	return strings.Join(s, ",")
}

func (p *prefixList) Type() string { return "cidrs" }

func (p *prefixList) Set(v string) error {
	*p = nil
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		pfx, err := netip.ParsePrefix(f)
		if err != nil {
			return fmt.Errorf("%q is not a CIDR", f)
		}
		if pfx != pfx.Masked() {
			return fmt.Errorf("%q has host bits set (did you mean %s?)", f, pfx.Masked())
		}
		*p = append(*p, pfx)
	}
	return nil
}

// environment gives the defaults of the flags that depend on the node: the pod's environment,
// the node's resolver, where egressd runs from.
type environment struct {
	nodeName, namespace, cniBinary string
	dnsServers                     []string
}

// nodeEnvironment is the environment the agent runs in.
func nodeEnvironment() environment {
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = "egressd"
	}
	return environment{nodeName: os.Getenv("NODE_NAME"), namespace: ns, cniBinary: defaultCNIBinary(), dnsServers: defaultDNSServers()}
}

// newFlagSet declares the agent's flags into c, with the node-dependent defaults of env.
func newFlagSet(c *config, env environment) *flag.FlagSet {
	fs := flag.NewFlagSet("egressd", flag.ContinueOnError)
	fs.SortFlags = false
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "path to a kubeconfig; empty uses the in-cluster configuration")
	c.apiRate.declare(fs, 50, 100, "the agent (its NodeReport, announcements and reads)")
	fs.StringVar(&c.nodeName, "node-name", env.nodeName, "name of the Node this agent runs on (default $NODE_NAME)")
	fs.StringVar(&c.bpfPinRoot, "bpf-pin-root", pinroot.Default(), "bpffs directory under which egressd pins its maps, programs and links (default $"+pinroot.Env+" or /sys/fs/bpf/egressd)")
	fs.StringVar(&c.metricsAddr, "metrics-bind-address", ":9476", "host:port serving Prometheus metrics on /metrics; \"0\" disables")
	fs.BoolVar(&c.profiling, "profiling", false, "also serve Go's runtime profiles (pprof) at /debug/pprof/ on --profiling-bind-address, for diagnosing CPU and memory use")
	fs.StringVar(&c.profilingBind, "profiling-bind-address", defaultProfilingAddr, "loopback host:port of the runtime profiles (--profiling): reachable from the node alone")
	fs.BoolVar(&c.metricsAuth, "metrics-auth", true, "require of /metrics and /debug/pprof/ callers a bearer token whose user may get that path (TokenReview and SubjectAccessReview against the API server, as the kubelet does; grant it with the ClusterRole egressd-metrics-reader): the port is reachable from pods. false serves them to anyone who reaches the port")
	fs.StringVar(&c.healthAddr, "health-probe-bind-address", ":9477", "host:port serving /healthz and /readyz")
	fs.StringVar(&c.reachabilityAddr, "egress-health-bind-address", fmt.Sprintf(":%d", reachability.DefaultPort),
		"host:port serving grpc.health.v1 Service_Egress_IP, probed by the controller to judge this node's reachability for EgressIP and EgressService (upstream's egressip-node-healthcheck-port); \"0\" disables, and the node is then unreachable for them")
	fs.Var(&c.clusterCIDRs, "cluster-cidr", "comma-separated pod network CIDRs, replacing those discovered from the Nodes' spec.podCIDRs (for a CNI with its own IPAM, e.g. Calico's IP pools)")
	fs.Var(&c.serviceCIDRs, "service-cidr", "comma-separated service network CIDRs, added to those of the ServiceCIDR objects (for a cluster without them)")
	fs.DurationVar(&c.debounce, "sync-debounce", 10*time.Millisecond, "least time from the end of a sync to a sync for an API or kernel change: a burst of changes (a new veth's link events) costs one sync per period, an isolated change syncs at once; a pod's CNI ADD, a BFD session Down and egressd's rules deleted behind its back do not wait")
	fs.DurationVar(&c.resync, "sync-period", 5*time.Minute, "period of the full re-sync that repairs drift of kernel state (every facility looked at in the kernel, also those whose part of the state did not change)")
	fs.UintVar(&c.aclLogRate, "acl-logging-rate-limit", classifier.DefaultACLLogRate, "EgressFirewall verdicts logged per second per rule for namespaces annotated k8s.ovn.org/acl-logging; 0 logs none")
	fs.StringSliceVar(&c.dnsServers, "dns-server", env.dnsServers, "comma-separated ip:port of the DNS servers that resolve EgressFirewall dnsName rules, asked in order until one answers (default: the nameservers of /etc/resolv.conf)")
	fs.DurationVar(&c.dnsMinTTL, "dns-min-ttl", 0, "refresh a dnsName no sooner than this, whatever its TTL, to protect the resolver (a TTL of 0 is refreshed every 5 s, as upstream)")
	fs.IntVar(&c.dnsPerNamespace, "dns-learned-per-namespace", dnsnames.DefaultNamespaceAddresses, "addresses learned from the DNS answers to one namespace's pods kept at once on this node; beyond, its pods' answers teach nothing new until some expire (its NodeReport notes it, which the EgressFirewall's status shows)")
	fs.Uint16Var(&c.dnsAnswersQueue, "dns-answers-queue", defaultDNSAnswersQueue, "NFQUEUE number on which the DNS answers to pods of namespaces with dnsName rules are read, and held until the addresses they give are allowed (wildcard rules match only through them): answers from the cluster's DNS Service (kube-system/kube-dns) and from --dns-server only; 0 reads none")
	fs.Uint32Var(&c.markMask, "fwmark-mask", dataplane.DefaultMarkMask, "skb->mark bits egressd may set on steered packets: one run of bits, clear of the CNI's and kube-proxy's (refused if it overlaps kube-proxy's 0x4000 or 0x8000 or Cilium's 0x0f00; with Calico, bits its --iptables-mark-mask leaves free)")
	c.routing = routing.DefaultConfig()
	fs.IntVar(&c.routing.RulePriorityBase, "rule-priority-base", c.routing.RulePriorityBase, "first ip rule priority of egressd's reserved range")
	fs.IntVar(&c.routing.RulePriorityCount, "rule-priority-count", c.routing.RulePriorityCount, "size of egressd's ip rule priority range")
	fs.IntVar(&c.routing.TableBase, "route-table-base", c.routing.TableBase, "first routing table ID of egressd's reserved range")
	fs.IntVar(&c.routing.TableCount, "route-table-count", c.routing.TableCount, "size of egressd's routing table range")
	fs.StringVar(&c.announceToken, "pod-announce-token-file", podannounce.DefaultTokenFile, "this agent's pod-bound ServiceAccount token for audience "+podannounce.Audience+" (a projected volume), sent with each announcement of a new pod to its egress nodes, which check it with a TokenReview: its node-name claim must be the pod's node")
	fs.StringVar(&c.announceIdentity, "pod-announce-identity", "system:serviceaccount:"+env.namespace+":egressd", "the agents' ServiceAccount user, the only one whose tokens may announce pods")
	fs.Uint16Var(&c.healthPort, "egressip-health-port", reachability.DefaultPort, "port of the gRPC health service (Service_Egress_IP) on the other nodes, to which this agent announces its new pods that leave through them (the controller probes the same port)")
	fs.DurationVar(&c.addressLifetime, "egress-address-lifetime", 40*time.Second, "valid lifetime of the egress addresses this node hosts, renewed every 5 s (or a third of it) while the agent runs: an agent gone longer loses them; keep it above the leader's 30 s grace for an absent agent plus a renewal, so that they go after the leader moved them, not before (0: forever)")
	fs.DurationVar(&c.gatewayBFD, "external-gateway-bfd-interval", 300*time.Millisecond, "desired transmit and required receive interval of the BFD sessions to external gateways (bfdEnabled hops): a gateway is taken out once its detection multiplier times the slower of this and its own transmit interval passed without its packets")
	fs.Uint8Var(&c.gatewayBFDMult, "external-gateway-bfd-multiplier", 3, "BFD detection multiplier this node announces to external gateways (how many of its intervals a gateway waits before it takes this node for down)")
	fs.BoolVar(&c.legacyGateways, "external-gateway-annotations", false, "also honour the legacy external gateway annotations of older OVN-Kubernetes (k8s.ovn.org/routing-external-gws, routing-namespaces, routing-network, bfd-enabled), merged with AdminPolicyBasedExternalRoutes as upstream did")
	c.steering = nodeagent.SteerAuto
	fs.Var(&c.steering, "egressip-steering", "how steered traffic (EgressIP, EgressService) reaches the egress node, the same on every node: direct (routed with the pod's source), vxlan (through egressd's own VXLAN device "+dataplane.TunnelDevice+", for fabrics and clouds that drop a pod's source), or auto (direct to a node on this node's primary network, vxlan beyond it and always in a cloud, i.e. when nodes carry the cloud's egress-ipconfig annotation)")
	fs.Uint32Var(&c.tunnel.VNI, "vxlan-vni", tunnel.DefaultVNI, "VNI of egressd's VXLAN tunnel, the same on every node")
	fs.Uint16Var(&c.tunnel.Port, "vxlan-port", tunnel.DefaultPort, "UDP port of egressd's VXLAN tunnel, the same on every node (not flannel's or Cilium's 8472, nor Calico's 4789)")
	fs.StringVar(&c.cniSocket, "cni-socket", cniapi.DefaultSocket, "unix socket on which egressd's chained CNI plugin (egressd-cni) hands over new pods; \"\" disables")
	fs.StringVar(&c.cniCacheDir, "cni-cache-dir", libcni.CacheDir, "the container runtime's CNI cache directory (libcni's; its results/ are read, never written): the host-side interfaces of a pod added before egressd-cni was chained, whose bridge port then guards its addresses too (\"\" disables)")
	fs.StringVar(&c.cniConfDir, "cni-conf-dir", "", "the host's CNI configuration directory: egressd-cni is appended to the primary network configuration there, and kept there (\"\": not installed, chain it by hand)")
	fs.StringVar(&c.cniBinDir, "cni-bin-dir", "", "the host's CNI plugin directory: the agent installs egressd-cni there at start (with --cni-conf-dir; \"\": installed by the DaemonSet's init container, egressd install-cni, so that the agent needs no write access to the host's plugins)")
	fs.StringVar(&c.cniBinary, "cni-plugin-binary", env.cniBinary, "the egressd-cni executable to install, with egressd-cni-router from its directory (with --cni-conf-dir; default egressd-cni next to egressd)")
	fs.BoolVar(&c.loosenRPFilter, "loosen-rp-filter", true, "set net.ipv4.conf.<interface>.rp_filter to 2 (loose) where it is strict on an interface egressd routes pods' traffic through other than the default route's (a secondary network's egress IP, an external gateway's): the replies arrive there. Put back when no longer used, or by egressctl cleanup (remembered in the directory of --cni-socket, /run/egressd by default: give egressctl cleanup the same --cni-socket). false: only reported, and what an earlier agent loosened is put back")
	fs.StringVar(&c.ciliumNodeConfig, "cilium-node-config", "/var/run/cilium/state/globals/node_config.h", "the node configuration header Cilium's agent builds its programs with, read for the settings compiled into them that undo egressd's steering (BPF masquerading: metric egressd_cni_conflicts, Event CNIConflict on the Node); absent on nodes without Cilium. \"\": not read")
	c.podNamespace = env.namespace
	fs.StringVar(&c.cniDaemonSet, "cni-uninstall-with-daemonset", "", "the agent's own DaemonSet, in its namespace ($POD_NAMESPACE): when the agent stops after that DaemonSet was deleted (an uninstall, not an upgrade or a restart), it takes egressd-cni out of the CNI chain of --cni-conf-dir, so that new pods do not wait for an agent that is gone (\"\": the chain is left as it is, egressctl cleanup removes it)")
	fs.BoolVar(&c.cniFailOpen, "cni-fail-open", false, "installed chain entry lets a pod start when egressd does not answer its CNI ADD in time, unprogrammed until egressd is back (default: fail closed, the runtime retries)")
	fs.IntVarP(&c.verbosity, "v", "v", 0, "log verbosity: 0 info, 1 debug, higher adds client-go detail")
	fs.StringVar(&c.logFormat, "log-format", "json", "log format: json or text")
	movedToController(fs)
	return fs
}

// movedToController keeps the flags of the cluster-wide decisions, which moved to egressd
// controller, as accepted no-ops: an agent started with a previous release's arguments starts,
// and says where the flag went.
func movedToController(fs *flag.FlagSet) {
	for _, name := range []string{"leader-election-namespace", "leader-election-lease-duration", "leader-election-renew-deadline",
		"leader-election-retry-period", "egressip-cloud", "status-ignore-nodes", "egress-router-image"} {
		fs.String(name, "", "")
		_ = fs.MarkDeprecated(name, "it is a flag of egressd controller now, which makes the cluster-wide decisions; the agent ignores it")
	}
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	if err := parseFlagSet(newFlagSet(c, nodeEnvironment()), "egressd", args, stderr); err != nil {
		return nil, err
	}
	return c, c.validate()
}

// parseFlagSet parses args into fs: an error is one line, the full usage only on --help.
func parseFlagSet(fs *flag.FlagSet, command string, args []string, stderr io.Writer) error {
	fs.SetOutput(stderr)
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "Usage of %s:\n%s", command, fs.FlagUsages())
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	return nil
}

func (c *config) validate() error {
	var errs []error
	bad := func(flag, format string, a ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, a...)))
	}
	c.apiRate.check(bad)
	if c.nodeName == "" {
		bad("node-name", "required (or set $NODE_NAME)")
	}
	if !filepath.IsAbs(c.bpfPinRoot) {
		bad("bpf-pin-root", "%q must be an absolute path", c.bpfPinRoot)
	}
	checkEndpoints(c.healthAddr, c.metricsAddr, c.profilingBind, bad)
	if c.reachabilityAddr != "0" {
		if err := checkHostPort(c.reachabilityAddr); err != nil {
			bad("egress-health-bind-address", "%v", err)
		}
	}
	if c.aclLogRate > 100000 {
		bad("acl-logging-rate-limit", "%d is more than 100000 lines per second", c.aclLogRate)
	}
	if c.debounce < 0 || c.resync <= 0 {
		bad("sync-period", "sync period must be > 0 and debounce >= 0")
	}
	for _, server := range c.dnsServers {
		if _, err := netip.ParseAddrPort(server); err != nil {
			bad("dns-server", "%q is not ip:port", server)
		}
	}
	if c.cniConfDir != "" && c.cniSocket == "" {
		bad("cni-conf-dir", "installing egressd-cni needs its socket (--cni-socket)")
	}
	if c.cniDaemonSet != "" && c.cniConfDir == "" {
		bad("cni-uninstall-with-daemonset", "only egressd-cni installed by the agent (--cni-conf-dir) is taken out of the chain")
	}
	if len(c.dnsServers) == 0 {
		bad("dns-server", "at least one server")
	}
	if c.dnsPerNamespace < 1 {
		bad("dns-learned-per-namespace", "%d is not positive", c.dnsPerNamespace)
	}
	if c.dnsMinTTL < 0 {
		bad("dns-min-ttl", "%s is negative", c.dnsMinTTL)
	}
	if err := c.tunnel.Validate(); err != nil {
		bad("vxlan-vni", "%v", err)
	}
	if c.tunnel.Port == 0 {
		bad("vxlan-port", "must not be 0")
	}
	if c.logFormat != "json" && c.logFormat != "text" {
		bad("log-format", "%q is not json or text", c.logFormat)
	}
	return errors.Join(errs...)
}

// checkEndpoints checks the flags of a process's HTTP endpoints (the agent's and the
// controller's have the same names and meaning).
func checkEndpoints(health, metrics, profiling string, bad func(flag, format string, a ...any)) {
	if metrics != "0" {
		if err := checkHostPort(metrics); err != nil {
			bad("metrics-bind-address", "%v", err)
		}
	}
	if err := checkLoopback(profiling); err != nil {
		bad("profiling-bind-address", "%v", err)
	}
	if err := checkHostPort(health); err != nil {
		bad("health-probe-bind-address", "%v", err)
	}
}

// defaultProfilingAddr is where both processes serve their runtime profiles with --profiling.
const defaultProfilingAddr = "127.0.0.1:9475"

// checkLoopback checks a host:port whose host is a loopback address.
func checkLoopback(s string) error {
	if err := checkHostPort(s); err != nil {
		return err
	}
	host, _, _ := net.SplitHostPort(s)
	if a, err := netip.ParseAddr(host); host != "localhost" && (err != nil || !a.IsLoopback()) {
		return fmt.Errorf("%q: the host must be a loopback address (127.0.0.1, ::1, localhost)", s)
	}
	return nil
}

func checkHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %v", s, err)
	}
	if host != "" {
		if _, err := netip.ParseAddr(host); err != nil && host != "localhost" {
			return fmt.Errorf("%q: host must be an IP address or empty", s)
		}
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q: port must be 0-65535", s)
	}
	return nil
}

// defaultDNSServers are the node's nameservers, as the agent (host network) sees them.
func defaultDNSServers() []string {
	var out []string
	if b, err := os.ReadFile("/etc/resolv.conf"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "nameserver" {
				if a, err := netip.ParseAddr(f[1]); err == nil {
					out = append(out, netip.AddrPortFrom(a, 53).String())
				}
			}
		}
	}
	if len(out) == 0 {
		return []string{"127.0.0.1:53"}
	}
	return out
}

// defaultCNIBinary is egressd-cni beside the running egressd (both are in the image).
func defaultCNIBinary() string {
	exe, err := os.Executable()
	if err != nil {
		return "egressd-cni"
	}
	return filepath.Join(filepath.Dir(exe), "egressd-cni")
}

// rpFilterState is where the agent remembers the reverse path filters it loosened.
func (c *config) rpFilterState() string { return filepath.Join(c.stateDir(), rpfilter.StateFile) }

// dnsState is where the agent keeps the dnsName rules' last addresses for its next start.
func (c *config) dnsState() string { return filepath.Join(c.stateDir(), dnsnames.StateFile) }

// stateDir is where the agent keeps what outlives it until the node restarts: next to its CNI
// socket (/run/egressd, which egressctl cleanup reads).
func (c *config) stateDir() string {
	socket := c.cniSocket
	if socket == "" {
		socket = cniapi.DefaultSocket
	}
	return filepath.Dir(socket)
}

// profilingAddr is where the runtime profiles are served ("": not at all).
func (c *config) profilingAddr() string { return profilingAddr(c.profiling, c.profilingBind) }

func profilingAddr(on bool, addr string) string {
	if !on {
		return ""
	}
	return addr
}

// networks are the cluster networks of the command line.
func (c *config) networks() cluster.NetworkFlags {
	return cluster.NetworkFlags{Pods: c.clusterCIDRs, Services: c.serviceCIDRs}
}

// syncConfig is the sync loop's part of the command line.
func (c *config) syncConfig() nodeagent.Config {
	return nodeagent.Config{
		Node:            c.nodeName,
		Networks:        c.networks(),
		Debounce:        c.debounce,
		Resync:          c.resync,
		MarkMask:        c.markMask,
		Steering:        c.steering,
		LegacyGateways:  c.legacyGateways,
		GatewayBFD:      dataplane.BFDPeer{MinTx: c.gatewayBFD, MinRx: c.gatewayBFD, Multiplier: c.gatewayBFDMult},
		DNSAnswersQueue: c.dnsAnswersQueue,
		DNSResolvers:    c.dnsResolvers(),
	}
}

// dnsResolvers are the addresses of the agent's DNS servers (--dns-server): their answers to pods
// teach dnsName rules too.
func (c *config) dnsResolvers() []netip.Addr {
	var out []netip.Addr
	for _, s := range c.dnsServers {
		if ap, err := netip.ParseAddrPort(s); err == nil {
			out = append(out, ap.Addr().Unmap())
		}
	}
	return out
}

// defaultDNSAnswersQueue is egressd's NFQUEUE number: that of its tc filters' priority, far from
// the low numbers other users of NFQUEUE (an IPS, a userspace firewall) take by default.
const defaultDNSAnswersQueue = 49152
