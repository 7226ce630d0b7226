package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	flag "github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egressd/egressd/nodeagent/egressip"
	"github.com/egressd/egressd/nodeagent/egressrouter"
	"github.com/egressd/egressd/nodeagent/reachability"
)

// controllerConfig is egressd controller's command line.
type controllerConfig struct {
	kubeconfig        string
	apiRate           apiRate
	identity          string
	nodeName          string
	metricsAddr       string
	healthAddr        string
	profiling         bool
	profilingBind     string
	metricsAuth       bool
	leaderElectionNS  string
	leaseDuration     time.Duration
	renewDeadline     time.Duration
	retryPeriod       time.Duration
	clusterCIDRs      prefixList
	serviceCIDRs      prefixList
	healthPort        uint16
	reachTotalTimeout time.Duration
	reachInterval     time.Duration
	egressIPCloud     egressip.CloudMode
	statusIgnore      labels.Selector
	statusPerNodeUpTo int
	routerImage       string
	verbosity         int
	logFormat         string
}

// controllerIdentity is the replica's name in the Lease: its pod, and the node it runs on, so
// that who leads (and where) reads from the Lease and the metrics.
func controllerIdentity() string {
	name := os.Getenv("POD_NAME")
	if name == "" {
		name, _ = os.Hostname()
	}
	if node := os.Getenv("NODE_NAME"); node != "" {
		name += "@" + node
	}
	return name
}

// newControllerFlagSet declares the controller's flags into c; cloud and ignore receive the
// flags that parseControllerFlags converts after parsing.
func newControllerFlagSet(c *controllerConfig, env environment, identity string) (fs *flag.FlagSet, cloud, ignore *string) {
	fs = flag.NewFlagSet("egressd controller", flag.ContinueOnError)
	fs.SortFlags = false
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "path to a kubeconfig; empty uses the in-cluster configuration")
	c.apiRate.declare(fs, 200, 400, "the controller (the aggregate statuses, assignments and reads)")
	fs.StringVar(&c.identity, "identity", identity, "this replica's name in the leader Lease (default $POD_NAME@$NODE_NAME)")
	fs.StringVar(&c.nodeName, "node-name", env.nodeName, "the node this replica runs on (default $NODE_NAME): it answers this replica's probes whatever the network, so it does not count when the replica asks whether it is cut off from every egress node")
	fs.StringVar(&c.metricsAddr, "metrics-bind-address", ":9478", "host:port serving Prometheus metrics on /metrics; \"0\" disables")
	fs.BoolVar(&c.profiling, "profiling", false, "also serve Go's runtime profiles (pprof) at /debug/pprof/ on --profiling-bind-address")
	fs.StringVar(&c.profilingBind, "profiling-bind-address", defaultProfilingAddr, "loopback host:port of the runtime profiles (--profiling): reachable from the pod alone")
	fs.BoolVar(&c.metricsAuth, "metrics-auth", true, "require of /metrics and /debug/pprof/ callers a bearer token whose user may get that path (TokenReview and SubjectAccessReview against the API server, as the kubelet does; grant it with the ClusterRole egressd-metrics-reader): the port is reachable from pods. false serves them to anyone who reaches the port")
	fs.StringVar(&c.healthAddr, "health-probe-bind-address", ":9479", "host:port serving /healthz and /readyz (ready once the caches synced, leading or not)")
	fs.StringVar(&c.leaderElectionNS, "leader-election-namespace", env.namespace, "namespace of the leader election Lease (default $POD_NAMESPACE or egressd)")
	fs.DurationVar(&c.leaseDuration, "leader-election-lease-duration", time.Second,
		"how long the Lease is valid without renewal, in whole seconds (the Lease records seconds): a standby replica takes over that long after it last saw the leader renew, so that a leader lost with its node moves no egress IP much later than this (the dataplane does not change on a change of leader)")
	fs.DurationVar(&c.renewDeadline, "leader-election-renew-deadline", 600*time.Millisecond, "how long the leader retries renewing before it stops deciding (an API server slower than this makes the replicas take turns; nothing on the nodes changes); with the retry period, less than the lease duration, so that a leader cut off has stopped before a standby takes over")
	fs.DurationVar(&c.retryPeriod, "leader-election-retry-period", 150*time.Millisecond, "interval between the leader's renewals and the standby's looks at the Lease")
	fs.Var(&c.clusterCIDRs, "cluster-cidr", "comma-separated pod network CIDRs, replacing those discovered from the Nodes' spec.podCIDRs: the same as the agents'")
	fs.Var(&c.serviceCIDRs, "service-cidr", "comma-separated service network CIDRs, added to those of the ServiceCIDR objects: the same as the agents'")
	fs.Uint16Var(&c.healthPort, "egressip-health-port", reachability.DefaultPort, "port of the agents' gRPC health service (Service_Egress_IP) probed on every egress node, as upstream")
	fs.DurationVar(&c.reachTotalTimeout, "egressip-reachability-total-timeout", 450*time.Millisecond,
		"how long an egress node's health endpoint may stay silent before its egress IPs and EgressService hosts move (upstream's flag of that name); 0 disables the probes: only the Node's Ready condition counts. Shorter moves sooner and also on a short network blip")
	fs.DurationVar(&c.reachInterval, "egressip-reachability-interval", 150*time.Millisecond, "interval between two probes of a node (the silence above is counted in probes of this interval)")
	cloud = fs.String("egressip-cloud", "auto", "request egress IPs from the cloud through CloudPrivateIPConfigs (OpenShift's cloud-network-config-controller attaches them to the node's NIC) before using them: true, false, or auto (while any node carries the cloud.network.openshift.io/egress-ipconfig annotation)")
	ignore = fs.String("status-ignore-nodes", "", "label selector of nodes egressd does not run on: they are not waited for in the aggregate status of EgressFirewall, EgressQoS and AdminPolicyBasedExternalRoute")
	fs.IntVar(&c.statusPerNodeUpTo, "status-node-entries-up-to", 100, "the most nodes for which the status of EgressFirewall, EgressQoS and AdminPolicyBasedExternalRoute holds every node's entry, as upstream's zones write them; a larger cluster's statuses hold only the entries of nodes that failed or noted something (the aggregate status.status counts every node either way)")
	fs.StringVar(&c.routerImage, "egress-router-image", egressrouter.DefaultImage, "image of the EgressRouter router pods: egressd's own (they run \"egressd router-pod\")")
	fs.IntVarP(&c.verbosity, "v", "v", 0, "log verbosity: 0 info, 1 debug, higher adds client-go detail")
	fs.StringVar(&c.logFormat, "log-format", "json", "log format: json or text")
	return fs, cloud, ignore
}

func parseControllerFlags(args []string, stderr io.Writer) (*controllerConfig, error) {
	c := &controllerConfig{}
	fs, cloud, ignore := newControllerFlagSet(c, nodeEnvironment(), controllerIdentity())
	if err := parseFlagSet(fs, "egressd controller", args, stderr); err != nil {
		return nil, err
	}
	var err error
	if c.egressIPCloud, err = egressip.ParseCloudMode(*cloud); err != nil {
		return nil, fmt.Errorf("--egressip-cloud: %w", err)
	}
	if *ignore != "" {
		if c.statusIgnore, err = labels.Parse(*ignore); err != nil {
			return nil, fmt.Errorf("--status-ignore-nodes: %w", err)
		}
	}
	return c, c.validate()
}

func (c *controllerConfig) validate() error {
	var errs []error
	bad := func(flag, format string, a ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, a...)))
	}
	c.apiRate.check(bad)
	if c.identity == "" {
		bad("identity", "required (or set $POD_NAME)")
	}
	checkEndpoints(c.healthAddr, c.metricsAddr, c.profilingBind, bad)
	if c.statusPerNodeUpTo < 0 {
		bad("status-node-entries-up-to", "%d is negative", c.statusPerNodeUpTo)
	}
	if c.leaderElectionNS == "" {
		bad("leader-election-namespace", "required")
	}
	// client-go's own rule, with its jitter factor of 1.2 on the retry period; the Lease
	// object holds whole seconds (client-go truncates: 1.5 s would be 1 s, 0.5 s none).
	if c.leaseDuration%time.Second != 0 {
		bad("leader-election-lease-duration", "%s is not a whole number of seconds", c.leaseDuration)
	}
	// A leader cut off stops deciding at the latest a retry period (jittered) plus the renew
	// deadline after its last renewal; a standby takes over a lease duration after it last saw
	// one: the first must come before the second, or two replicas decide at once (seen with
	// 1 s / 800 ms / 200 ms: an egress IP moved back by the old leader).
	jitteredRetry := time.Duration(1.2 * float64(c.retryPeriod))
	if c.leaseDuration <= c.renewDeadline+jitteredRetry || c.renewDeadline <= jitteredRetry || c.retryPeriod <= 0 {
		bad("leader-election-lease-duration", "need lease duration (%s) > renew deadline (%s) + 1.2 x retry period (%s), renew deadline > 1.2 x retry period > 0",
			c.leaseDuration, c.renewDeadline, c.retryPeriod)
	}
	if c.reachTotalTimeout < 0 {
		bad("egressip-reachability-total-timeout", "%s is negative", c.reachTotalTimeout)
	}
	if c.reachInterval <= 0 || (c.reachTotalTimeout > 0 && c.reachInterval > c.reachTotalTimeout) {
		bad("egressip-reachability-interval", "%s must be > 0 and at most the total timeout (%s)", c.reachInterval, c.reachTotalTimeout)
	}
	if c.routerImage == "" {
		bad("egress-router-image", "required")
	}
	if c.logFormat != "json" && c.logFormat != "text" {
		bad("log-format", "%q is not json or text", c.logFormat)
	}
	return errors.Join(errs...)
}

// reachability is the probers' configuration for egress nodes: the silence of the total
// timeout, counted in probes of the interval (nil: probes disabled).
func (c *controllerConfig) reachability() *reachability.Config {
	if c.reachTotalTimeout == 0 {
		return nil
	}
	misses := int((c.reachTotalTimeout + c.reachInterval/2) / c.reachInterval)
	return &reachability.Config{Interval: c.reachInterval, Misses: max(misses, 1)}
}

// profilingAddr is where the runtime profiles are served ("": not at all).
func (c *controllerConfig) profilingAddr() string { return profilingAddr(c.profiling, c.profilingBind) }
