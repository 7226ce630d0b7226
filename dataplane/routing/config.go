package routing

import (
	"fmt"

	"github.com/vishvananda/netlink"
)

// Config says which kernel numbers belong to egressd. Everything egressd finds inside these
// ranges (rules) or stamped with Protocol (routes in its tables, nexthop objects) is its own: it
// adopts it after a restart and removes it when no longer wanted. Zero fields take the defaults.
type Config struct {
	// RulePriorityBase and RulePriorityCount are the ip rule priorities egressd owns
	// (default 6100 and 100: 6100..6199). Upstream OVN-Kubernetes uses 5000 (EgressIP
	// reroute), 5999 and 6000, and 32766/32767 are the kernel's main and default rules; egressd
	// sits after OVN's numbers so that both can coexist, and well before main.
	RulePriorityBase, RulePriorityCount int
	// TableBase and TableCount are the routing table IDs egressd owns (default 7100 and 100:
	// 7100..7199), clear of the kernel's 253..255, the small numbers people pick by hand, and
	// OVN-Kubernetes' per-interface tables (ifindex + 1000).
	TableBase, TableCount int
	// Protocol stamps egressd's routes, rules and nexthop objects (default 229, shown by iproute2
	// as "proto 229"; name it in /etc/iproute2/rt_protos.d/ as egressd if you like). It must
	// be above the kernel's own values (0..4) and unused by other routing daemons on the node.
	Protocol netlink.RouteProtocol
	// NexthopIDBase is where egressd starts looking for free nexthop object IDs (default
	// 71000000). Nexthop IDs are one namespace shared by every owner (FRR's zebra counts up
	// from 1 and gives protocol daemons ranges from 2^28), so egressd only ever creates an ID
	// that is free, exclusively, and recognises its own objects by Protocol, never by ID.
	NexthopIDBase uint32
}

// Defaults, see Config.
const (
	defaultRulePriorityBase  = 6100
	defaultRulePriorityCount = 100
	defaultTableBase         = 7100
	defaultTableCount        = 100
	defaultProtocol          = 229
	defaultNexthopIDBase     = 71000000
)

// DefaultConfig is the configuration of a node that sets no flags.
func DefaultConfig() Config {
	var c Config
	return c.withDefaults()
}

func (c Config) withDefaults() Config {
	if c.RulePriorityBase == 0 {
		c.RulePriorityBase = defaultRulePriorityBase
	}
	if c.RulePriorityCount == 0 {
		c.RulePriorityCount = defaultRulePriorityCount
	}
	if c.TableBase == 0 {
		c.TableBase = defaultTableBase
	}
	if c.TableCount == 0 {
		c.TableCount = defaultTableCount
	}
	if c.Protocol == 0 {
		c.Protocol = defaultProtocol
	}
	if c.NexthopIDBase == 0 {
		c.NexthopIDBase = defaultNexthopIDBase
	}
	return c
}

// validate rejects ranges that would make egressd own (and so remove) what is not its own.
func (c Config) validate() error {
	switch {
	case c.RulePriorityBase < 1 || c.RulePriorityCount < 1:
		return fmt.Errorf("rule priorities %d+%d: base and count must be positive", c.RulePriorityBase, c.RulePriorityCount)
	case c.RulePriorityBase+c.RulePriorityCount-1 > 32765:
		return fmt.Errorf("rule priorities %d..%d reach the kernel's main rule (32766)", c.RulePriorityBase, c.RulePriorityBase+c.RulePriorityCount-1)
	case c.TableBase < 1 || c.TableCount < 1:
		return fmt.Errorf("tables %d+%d: base and count must be positive", c.TableBase, c.TableCount)
	case int64(c.TableBase)+int64(c.TableCount)-1 > 0xfffffffe:
		return fmt.Errorf("tables %d+%d: past the largest table ID", c.TableBase, c.TableCount)
	case c.TableBase <= 255 && c.TableBase+c.TableCount-1 >= 253:
		return fmt.Errorf("tables %d..%d include the kernel's default, main or local table (253..255)", c.TableBase, c.TableBase+c.TableCount-1)
	case c.Protocol <= 4 || c.Protocol > 255:
		return fmt.Errorf("protocol %d: must be 5..255 (0..4 are the kernel's own)", c.Protocol)
	}
	return nil
}

// priority maps a rule offset to its kernel priority.
func (c Config) priority(offset int) (int, error) {
	if offset < 0 || offset >= c.RulePriorityCount {
		return 0, fmt.Errorf("rule priority offset %d outside 0..%d", offset, c.RulePriorityCount-1)
	}
	return c.RulePriorityBase + offset, nil
}

// table maps a table offset to its kernel ID.
func (c Config) table(offset int) (uint32, error) {
	if offset < 0 || offset >= c.TableCount {
		return 0, fmt.Errorf("table offset %d outside 0..%d", offset, c.TableCount-1)
	}
	return uint32(c.TableBase + offset), nil
}

func (c Config) ownsPriority(p int) bool {
	return p >= c.RulePriorityBase && p < c.RulePriorityBase+c.RulePriorityCount
}

func (c Config) ownsTable(t uint32) bool {
	return int64(t) >= int64(c.TableBase) && int64(t) < int64(c.TableBase)+int64(c.TableCount)
}
