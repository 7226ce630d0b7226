package egressip

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/netip"

	cloudv1 "github.com/egressd/egressd/api/cloudnetwork/v1"
	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/nodeagent/cluster"
)

// CloudConfigAnnotation is set on each node by OpenShift's cloud-network-config-controller: the
// cloud NIC egress IPs are attached to, its subnets and how many more IPs the cloud lets it hold.
// Its presence on a node is what "cloud mode" detects.
const CloudConfigAnnotation = "cloud.network.openshift.io/egress-ipconfig"

// unlimited is upstream's UnlimitedNodeCapacity: a capacity the annotation leaves out.
const unlimited = math.MaxInt32

// CloudConfig is a node's egress IP configuration in cloud mode: the cloud subnets that may
// host egress IPs on it (instead of the primary and secondary host networks of bare metal) and
// its capacities, in total and per family.
type CloudConfig struct {
	// Interface is the cloud's name of the NIC (e.g. an AWS ENI id), for messages only.
	Interface string
	V4, V6    netip.Prefix // masked
	// Capacity caps the egress IPs the node hosts: in total and per family.
	Capacity Capacity
}

// Capacity of a node for egress IPs; upstream's default for an absent field is unlimited.
type Capacity struct {
	IP, IPv4, IPv6 int
}

type cloudConfigJSON struct {
	Interface string `json:"interface"`
	IFAddr    struct {
		IPv4 string `json:"ipv4,omitempty"`
		IPv6 string `json:"ipv6,omitempty"`
	} `json:"ifaddr"`
	Capacity struct {
		IP   *int `json:"ip,omitempty"`
		IPv4 *int `json:"ipv4,omitempty"`
		IPv6 *int `json:"ipv6,omitempty"`
	} `json:"capacity"`
}

// ParseCloudConfig reads the annotation value as upstream's ParseCloudEgressIPConfig does: a
// JSON list of which only the first entry counts.
func ParseCloudConfig(s string) (CloudConfig, error) {
	var list []cloudConfigJSON
	if err := json.Unmarshal([]byte(s), &list); err != nil {
		return CloudConfig{}, fmt.Errorf("failed to unmarshal annotation %s: %w", CloudConfigAnnotation, err)
	}
	if len(list) == 0 {
		return CloudConfig{}, fmt.Errorf("empty annotation %s", CloudConfigAnnotation)
	}
	raw := list[0]
	c := CloudConfig{Interface: raw.Interface, Capacity: Capacity{
		IP: capacity(raw.Capacity.IP), IPv4: capacity(raw.Capacity.IPv4), IPv6: capacity(raw.Capacity.IPv6)}}
	var err error
	if c.V4, err = cloudSubnet(raw.IFAddr.IPv4, true); err != nil {
		return CloudConfig{}, err
	}
	if c.V6, err = cloudSubnet(raw.IFAddr.IPv6, false); err != nil {
		return CloudConfig{}, err
	}
	return c, nil
}

func capacity(p *int) int {
	if p == nil {
		return unlimited
	}
	return *p
}

// cloudSubnet is a cloud subnet of the annotation: its prefix, masked.
func cloudSubnet(s string, v4 bool) (netip.Prefix, error) {
	p, err := cluster.ParseFamilyPrefix(s, v4, CloudConfigAnnotation)
	return p.Masked(), err
}

// contains says whether a cloud subnet of the node contains ip.
func (c *CloudConfig) contains(ip netip.Addr) bool {
	return c.V4.IsValid() && c.V4.Contains(ip) || c.V6.IsValid() && c.V6.Contains(ip)
}

// fits says whether the node may take one more egress IP of ip's family, given how many of
// each family it hosts.
func (c *CloudConfig) fits(ip netip.Addr, v4, v6 int) bool {
	if v4+v6 >= c.Capacity.IP {
		return false
	}
	if ip.Is4() {
		return v4 < c.Capacity.IPv4
	}
	return v6 < c.Capacity.IPv6
}

// CloudIPs is the cloud's side of the assignment in cloud mode (cloudprivateip.Requester,
// wired by the controller's main): an egress IP is used on a node once the cloud confirmed it
// there, through CloudPrivateIPConfig requests.
type CloudIPs interface {
	// Reset forgets the problems reported so far (a new leadership reports them again).
	Reset()
	// Held are eips as the leader holds them in the cloud (cpics: confirmed and pending
	// requests), what the assignment starts from.
	Held(eips []*ovnv1.EgressIP, cpics []*cloudv1.CloudPrivateIPConfig) []*ovnv1.EgressIP
	// Plan returns the status items of desired the cloud confirmed, and the requests that
	// bring the cloud to desired, to make once that status is written.
	Plan(eip string, desired []ovnv1.EgressIPStatusItem, cpics []*cloudv1.CloudPrivateIPConfig, nodeExists func(string) bool) ([]ovnv1.EgressIPStatusItem, func(context.Context))
	// ReleaseOrphans releases the cloud's IPs no EgressIP wants any more.
	ReleaseOrphans(ctx context.Context, eips []*ovnv1.EgressIP, cpics []*cloudv1.CloudPrivateIPConfig)
}
