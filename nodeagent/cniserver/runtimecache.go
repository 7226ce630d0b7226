package cniserver

import (
	"net/netip"
	"sync"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
)

// RuntimeCache finds the host-side interfaces of pods whose ADD egressd-cni never saw (added
// before the plugin was chained, or while a CNI's installer had rewritten the configuration
// without it) in the container runtime's CNI result cache: libcni keeps each attachment's
// result there (/var/lib/cni/results), written by the runtime, never by a pod. Without them a
// bridged pod's port is unknown, and the addresses it sends from there are not checked.
type RuntimeCache struct {
	// Dir is libcni's cache directory (the runtime's; "" is libcni's default, /var/lib/cni).
	Dir string
	// Every is the least time between two reads of the directory.
	Every time.Duration
	now   func() time.Time

	mu     sync.Mutex
	readAt time.Time
	pods   map[podKey][]sandbox
}

// sandbox is one cached attachment of a pod: its addresses and host-side interfaces.
type sandbox struct {
	ips  []netip.Addr
	host []string
}

// HostInterfaces returns the host-side interfaces of the pod's sandbox that has all of ips
// (the pod's addresses now: an older sandbox's stale entry has others), or nil.
func (c *RuntimeCache) HostInterfaces(namespace, name string, ips []netip.Addr) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if host := c.find(podKey{namespace, name}, ips); host != nil {
		return host
	}
	now := time.Now()
	if c.now != nil {
		now = c.now()
	}
	if !c.readAt.IsZero() && now.Sub(c.readAt) < c.Every {
		return nil
	}
	c.readAt = now
	c.pods = readRuntimeCache(c.Dir)
	return c.find(podKey{namespace, name}, ips)
}

func (c *RuntimeCache) find(k podKey, ips []netip.Addr) []string {
	for _, s := range c.pods[k] {
		if len(ips) > 0 && containsAll(s.ips, ips) {
			return s.host
		}
	}
	return nil
}

// cachedResult is the result of an attachment of a configuration list, or of a single
// network configuration.
func cachedResult(cni *libcni.CNIConfig, a *libcni.NetworkAttachment) (types.Result, error) {
	rt := &libcni.RuntimeConf{ContainerID: a.ContainerID, IfName: a.IfName}
	if list, err := libcni.ConfListFromBytes(a.Config); err == nil {
		return cni.GetNetworkListCachedResult(list, rt)
	}
	conf, err := libcni.ConfFromBytes(a.Config)
	if err != nil {
		return nil, err
	}
	return cni.GetNetworkCachedResult(conf, rt)
}

// readRuntimeCache reads every cached attachment of dir with libcni; one it cannot read is
// skipped (another network's, or one being written).
func readRuntimeCache(dir string) map[podKey][]sandbox {
	cni := libcni.NewCNIConfigWithCacheDir(nil, dir, nil)
	attachments, err := cni.GetCachedAttachments("")
	if err != nil {
		return nil
	}
	out := map[podKey][]sandbox{}
	for _, a := range attachments {
		var k podKey
		for _, kv := range a.CniArgs {
			switch kv[0] {
			case "K8S_POD_NAMESPACE":
				k.namespace = kv[1]
			case "K8S_POD_NAME":
				k.name = kv[1]
			}
		}
		if k.name == "" {
			continue
		}
		cached, err := cachedResult(cni, a)
		if err != nil || cached == nil {
			continue
		}
		res, err := current.NewResultFromResult(cached)
		if err != nil {
			continue
		}
		var s sandbox
		for _, ip := range res.IPs {
			if a, ok := netip.AddrFromSlice(ip.Address.IP); ok {
				s.ips = append(s.ips, a.Unmap())
			}
		}
		for _, i := range res.Interfaces {
			if i.Sandbox == "" {
				s.host = append(s.host, i.Name)
			}
		}
		if len(s.host) > 0 {
			out[k] = append(out[k], s)
		}
	}
	return out
}
