package main

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/dataplane/tunnel"
	"github.com/egressd/egressd/nodeagent"
)

func TestParseFlagsDefaults(t *testing.T) {
	t.Setenv("NODE_NAME", "node-a")
	t.Setenv("POD_NAMESPACE", "")
	c, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.nodeName != "node-a" || c.bpfPinRoot != "/sys/fs/bpf/egressd" || c.metricsAddr != ":9476" ||
		c.kubeconfig != "" || c.reachabilityAddr != ":9107" ||
		c.steering != nodeagent.SteerAuto || c.tunnel != (tunnel.Config{VNI: 229, Port: 4799}) ||
		c.apiRate != (apiRate{qps: 50, burst: 100}) {
		t.Errorf("defaults: %+v", c)
	}
}

func TestParseFlagsDualStack(t *testing.T) {
	c, err := parseFlags([]string{"--node-name=n", "--cluster-cidr=10.244.0.0/16,fd00:10:244::/48", "--service-cidr", "10.96.0.0/16"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.clusterCIDRs.String(); got != "10.244.0.0/16,fd00:10:244::/48" {
		t.Errorf("cluster CIDRs = %s", got)
	}
}

// Each bad value fails with a message that names the flag.
func TestParseFlagsErrorsNameTheFlag(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	for flag, args := range map[string][]string{
		"--node-name":                  {},
		"--cluster-cidr":               {"--node-name=n", "--cluster-cidr=10.0.0.0/33"},
		"--service-cidr":               {"--node-name=n", "--service-cidr=10.96.0.1/16"},
		"--bpf-pin-root":               {"--node-name=n", "--bpf-pin-root=x"},
		"--metrics-bind-address":       {"--node-name=n", "--metrics-bind-address=:99999"},
		"--health-probe-bind-address":  {"--node-name=n", "--health-probe-bind-address=nohost"},
		"--egress-health-bind-address": {"--node-name=n", "--egress-health-bind-address=:9107x"},
		"--log-format":                 {"--node-name=n", "--log-format=xml"},
		"--egressip-steering":          {"--node-name=n", "--egressip-steering=gre"},
		"--vxlan-vni":                  {"--node-name=n", "--vxlan-vni=16777216"},
		"--vxlan-port":                 {"--node-name=n", "--vxlan-port=0"},
		"--profiling-bind-address":     {"--node-name=n", "--profiling", "--profiling-bind-address=0.0.0.0:9475"},
		"--kube-api-qps":               {"--node-name=n", "--kube-api-qps=0"},
		"--kube-api-burst":             {"--node-name=n", "--kube-api-burst=0"},
	} {
		_, err := parseFlags(args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s: err = %v", flag, err)
		}
	}
	// Several pools of a family are fine (Calico's IP pools): the flag replaces discovery.
	c, err := parseFlags([]string{"--node-name=n", "--cluster-cidr=10.0.0.0/8,10.1.0.0/16"}, io.Discard)
	if err != nil || len(c.clusterCIDRs) != 2 {
		t.Errorf("two v4 cluster CIDRs: %v", err)
	}
}

// The flags that moved to egressd controller are accepted and ignored, so that an agent started
// with a previous release's arguments still starts.
func TestParseFlagsMovedToController(t *testing.T) {
	if _, err := parseFlags([]string{"--node-name=n", "--leader-election-namespace=x", "--leader-election-lease-duration=15s",
		"--egressip-cloud=true", "--status-ignore-nodes=a=b", "--egress-router-image=i"}, io.Discard); err != nil {
		t.Error(err)
	}
}

func TestParseControllerFlags(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "")
	t.Setenv("POD_NAME", "egressd-controller-x")
	t.Setenv("NODE_NAME", "cp-1")
	c, err := parseControllerFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.identity != "egressd-controller-x@cp-1" || c.leaderElectionNS != "egressd" || c.metricsAddr != ":9478" || c.healthAddr != ":9479" {
		t.Errorf("defaults: %+v", c)
	}
	// 450 ms of silence in probes 150 ms apart: three misses, as before the flag.
	if r := c.reachability(); r == nil || r.Misses != 3 || r.Interval != 150*time.Millisecond {
		t.Errorf("reachability %+v", r)
	}
	c, err = parseControllerFlags([]string{"--egressip-reachability-total-timeout=0"}, io.Discard)
	if err != nil || c.reachability() != nil {
		t.Errorf("total timeout 0 disables the probes: %v, %+v", err, c)
	}
	for flag, args := range map[string][]string{
		"--leader-election-lease-duration":      {"--leader-election-lease-duration=1500ms"},
		"renew deadline (900ms) + 1.2 x retry":  {"--leader-election-renew-deadline=900ms"},
		"--egressip-reachability-total-timeout": {"--egressip-reachability-total-timeout=-1s"},
		"--egressip-reachability-interval":      {"--egressip-reachability-total-timeout=1s", "--egressip-reachability-interval=2s"},
		"--egressip-cloud":                      {"--egressip-cloud=maybe"},
		"--status-ignore-nodes":                 {"--status-ignore-nodes=a in (b"},
		"--log-format":                          {"--log-format=xml"},
	} {
		if _, err := parseControllerFlags(args, io.Discard); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s: err = %v", flag, err)
		}
	}
}
