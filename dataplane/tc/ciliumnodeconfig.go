package tc

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// Cilium compiles some settings into its programs rather than keeping them in their
// .rodata.config: its agent renders them as defines in the node's configuration header
// (node_config.h, under its state directory's "globals") and builds every program with it.
// BPF masquerading is one: cil_to_netdev, at egress of the node's devices, then masquerades pod
// traffic after egressd's steering and source NAT, and no loaded program tells.

// ciliumToNetdev is Cilium's program at egress of the node's devices (bpf_host.c).
const ciliumToNetdev = "cil_to_netdev"

// compiledSettings are the defines of Cilium's node configuration that undo what egressd
// programs (pkg/datapath/linux/config, v1.20: with bpf.masquerade and the family's masquerade).
var compiledSettings = []Conflict{
	{ciliumToNetdev, "ENABLE_MASQUERADE_IPV4"}, {ciliumToNetdev, "ENABLE_MASQUERADE_IPV6"},
}

// CompiledConflicts are the known conflicts the Cilium agent compiled into its programs, from
// its node configuration header at path: none when there is none (no Cilium on the node).
func CompiledConflicts(path string) ([]Conflict, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	defined := map[string]bool{}
	s := bufio.NewScanner(f)
	s.Buffer(nil, 1<<20)
	for s.Scan() {
		// "#define ENABLE_MASQUERADE_IPV4 1", as Cilium renders a define of its map.
		if f := strings.Fields(s.Text()); len(f) == 3 && f[0] == "#define" && f[2] != "0" {
			defined[f[1]] = true
		}
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var out []Conflict
	for _, c := range compiledSettings {
		if defined[c.Setting] {
			out = append(out, c)
		}
	}
	return out, nil
}
