package egressservice

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
)

// ResolveTable turns spec.network into a kernel routing table number, as `ip rule ... table
// <network>` would: a number is used as is; a name is looked up in rtTables (the content of
// /etc/iproute2/rt_tables and its rt_tables.d files: "<id> <name>" lines, # comments), else taken
// as a VRF device whose table vrfTable returns. The kernel side (reading the files, the VRF's
// table from netlink) belongs to the dataplane, which calls this with what it read.
func ResolveTable(network, rtTables string, vrfTable func(dev string) (uint32, bool)) (uint32, error) {
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
