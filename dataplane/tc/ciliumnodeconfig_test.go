package tc

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestCompiledConflicts(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name, header string
		want         []Conflict
	}{
		{"BPF masquerade, both families", "#define ENABLE_NODEPORT 1\n#define ENABLE_MASQUERADE_IPV4 1\n#define ENABLE_MASQUERADE_IPV6 1\n#define IPV4_SNAT_EXCLUSION_DST_CIDR 0xa000000\n",
			[]Conflict{{ciliumToNetdev, "ENABLE_MASQUERADE_IPV4"}, {ciliumToNetdev, "ENABLE_MASQUERADE_IPV6"}}},
		{"iptables masquerade", "#define ENABLE_NODEPORT 1\n#define ENABLE_IPV4 1\n", nil},
		{"a define turned off", "#define ENABLE_MASQUERADE_IPV4 0\n", nil},
		{"mentioned, not defined", "/* ENABLE_MASQUERADE_IPV4 */\n#undef ENABLE_MASQUERADE_IPV4\n", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, "node_config.h")
			if err := os.WriteFile(path, []byte(c.header), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := CompiledConflicts(path)
			if err != nil || !slices.Equal(got, c.want) {
				t.Fatalf("%v, %v; want %v", got, err, c.want)
			}
		})
	}
	if got, err := CompiledConflicts(filepath.Join(dir, "absent.h")); err != nil || got != nil {
		t.Errorf("no Cilium on the node: %v, %v; want none", got, err)
	}
}
