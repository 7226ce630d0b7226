package cniserver

import (
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
)

// bridgeExec plays the bridge plugin for libcni: ADD answers a result with the bridge, the
// pod's host-side veth and its eth0 in the sandbox, as the reference plugin does.
type bridgeExec struct {
	version.PluginDecoder
	veth string
	ips  []string
}

func (e *bridgeExec) ExecPlugin(_ context.Context, _ string, _ []byte, environ []string) ([]byte, error) {
	if !slices.Contains(environ, "CNI_COMMAND=ADD") {
		return nil, nil
	}
	res := &current.Result{CNIVersion: "1.1.0", Interfaces: []*current.Interface{
		{Name: "cni0", Mac: "02:00:00:00:00:01"}, {Name: e.veth, Mac: "02:00:00:00:00:02"},
		{Name: "eth0", Mac: "02:00:00:00:00:03", Sandbox: "/var/run/netns/cni-1"}}}
	two := 2
	for _, ip := range e.ips {
		addr, network, err := net.ParseCIDR(ip)
		if err != nil {
			return nil, err
		}
		network.IP = addr
		res.IPs = append(res.IPs, &current.IPConfig{Address: *network, Interface: &two})
	}
	return json.Marshal(res)
}

func (e *bridgeExec) FindInPath(plugin string, _ []string) (string, error) {
	return "/opt/cni/bin/" + plugin, nil
}

// TestRuntimeCacheHostInterfaces: the host-side interfaces of a pod whose ADD egressd-cni never
// saw come from the results libcni cached for the runtime: by the pod's name and addresses (not
// an older sandbox's with other addresses), re-read at most every Every.
func TestRuntimeCacheHostInterfaces(t *testing.T) {
	dir := t.TempDir()
	list, err := libcni.ConfListFromBytes([]byte(`{"cniVersion":"1.1.0","name":"lab","plugins":[{"type":"bridge","bridge":"cni0"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	add := func(id, pod, veth string, ips ...string) {
		cni := libcni.NewCNIConfigWithCacheDir([]string{"/opt/cni/bin"}, dir, &bridgeExec{veth: veth, ips: ips})
		rt := &libcni.RuntimeConf{ContainerID: id, NetNS: "/var/run/netns/cni-1", IfName: "eth0",
			Args: [][2]string{{"K8S_POD_NAMESPACE", "ns"}, {"K8S_POD_NAME", pod}}}
		if _, err := cni.AddNetworkList(context.Background(), list, rt); err != nil {
			t.Fatal(err)
		}
	}
	add("old", "web", "vethold", "10.244.1.5/24")
	add("new", "web", "vethnew", "10.244.1.7/24", "fd00:10:244:1::7/64")
	now := time.Unix(1000, 0)
	c := &RuntimeCache{Dir: dir, Every: 10 * time.Second, now: func() time.Time { return now }}
	ips := []netip.Addr{netip.MustParseAddr("10.244.1.7"), netip.MustParseAddr("fd00:10:244:1::7")}
	if got := c.HostInterfaces("ns", "web", ips); !slices.Equal(got, []string{"cni0", "vethnew"}) {
		t.Errorf("web's host interfaces: %v, want [cni0 vethnew] (the sandbox with its addresses)", got)
	}
	if got := c.HostInterfaces("ns", "web", []netip.Addr{netip.MustParseAddr("10.244.1.9")}); got != nil {
		t.Errorf("web with an address no sandbox has: %v, want none", got)
	}
	// A pod added since is found once Every has passed, not before.
	add("db", "db", "vethdb", "10.244.1.8/24")
	db := []netip.Addr{netip.MustParseAddr("10.244.1.8")}
	if got := c.HostInterfaces("ns", "db", db); got != nil {
		t.Errorf("db read again within Every: %v", got)
	}
	now = now.Add(10 * time.Second)
	if got := c.HostInterfaces("ns", "db", db); !slices.Equal(got, []string{"cni0", "vethdb"}) {
		t.Errorf("db after Every: %v, want [cni0 vethdb]", got)
	}

	// The store falls back on it for a pod it never saw an ADD of.
	s := NewStore()
	s.Runtime = c
	pods := []dataplane.Pod{{Origin: dataplane.Origin{Kind: cluster.KindPod, Namespace: "ns", Name: "db"}, IPs: db}}
	s.HostInterfaces(pods)
	if !strings.Contains(strings.Join(pods[0].HostInterfaces, ","), "vethdb") {
		t.Errorf("store: db's host interfaces %v, want vethdb among them", pods[0].HostInterfaces)
	}
}
