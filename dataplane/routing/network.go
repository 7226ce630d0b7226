package routing

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
)

// resolveTable turns a network name (EgressService's spec.network) into a kernel routing table
// number, as `ip rule ... table <network>` would: a number is used as is; a name is looked up in
// rtTables (the content of /etc/iproute2/rt_tables and its rt_tables.d files: "<id> <name>"
// lines, # comments), else taken as a VRF device whose table vrfTable returns.
func resolveTable(network, rtTables string, vrfTable func(dev string) (uint32, bool)) (uint32, error) {
	network = strings.TrimSpace(network)
	if network == "" {
		return 0, fmt.Errorf("empty network")
	}
	if id, err := strconv.ParseUint(network, 0, 32); err == nil {
		if id == 0 {
			return 0, fmt.Errorf("network %q: table 0 is not a table", network)
		}
		return uint32(id), nil
	}
	sc := bufio.NewScanner(strings.NewReader(rtTables))
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) < 2 || f[1] != network {
			continue
		}
		id, err := strconv.ParseUint(f[0], 0, 32)
		if err != nil || id == 0 {
			continue
		}
		return uint32(id), nil
	}
	if vrfTable != nil {
		if id, ok := vrfTable(network); ok {
			return id, nil
		}
	}
	return 0, fmt.Errorf("network %q: no such routing table (not a number, not in rt_tables, not a VRF)", network)
}

// networkTable resolves a network name on this node: rt_tables files, then VRF devices.
func networkTable(network string) (uint32, error) {
	var rt strings.Builder
	for _, p := range append([]string{"/etc/iproute2/rt_tables"}, rtTablesD()...) {
		if b, err := os.ReadFile(p); err == nil {
			rt.Write(b)
			rt.WriteByte('\n')
		}
	}
	return resolveTable(network, rt.String(), func(dev string) (uint32, bool) {
		l, err := netlink.LinkByName(dev)
		if err != nil {
			return 0, false
		}
		vrf, ok := l.(*netlink.Vrf)
		if !ok {
			return 0, false
		}
		return vrf.Table, true
	})
}

func rtTablesD() []string {
	files, _ := filepath.Glob("/etc/iproute2/rt_tables.d/*.conf")
	return files
}
