// Command specdiff compares what two BPF objects declare to their loader: maps (name, type,
// key and value sizes and BTF type names, max entries, flags, pinning), programs (name, type,
// attach type, section, license) and variables (name, size, initial value). It is what
// bpf/generate.sh --verify can still check when the host's clang is not the one the committed
// objects were built with, so that their instructions cannot be compared byte for byte.
//
// Usage: go run ./bpf/internal/specdiff COMMITTED.o REGENERATED.o
package main

import (
	"bytes"
	"fmt"
	"os"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: specdiff COMMITTED.o REGENERATED.o")
		os.Exit(2)
	}
	a, err := describe(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	b, err := describe(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if diff := compare(a, b); len(diff) > 0 {
		for _, d := range diff {
			fmt.Fprintln(os.Stderr, d)
		}
		os.Exit(1)
	}
}

// describe lists what the loader sees of an object, one line per map, program and variable.
func describe(path string) (map[string]string, error) {
	spec, err := ebpf.LoadCollectionSpec(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := map[string]string{}
	for name, m := range spec.Maps {
		out["map "+name] = fmt.Sprintf("type=%s key=%d(%s) value=%d(%s) max_entries=%d flags=%#x pinning=%d",
			m.Type, m.KeySize, typeName(m.Key), m.ValueSize, typeName(m.Value), m.MaxEntries, m.Flags, m.Pinning)
	}
	for name, p := range spec.Programs {
		out["program "+name] = fmt.Sprintf("type=%s attach=%s section=%s license=%s", p.Type, p.AttachType, p.SectionName, p.License)
	}
	for name, v := range spec.Variables {
		val := make([]byte, v.Size())
		if err := v.Get(val); err != nil {
			return nil, fmt.Errorf("%s: variable %s: %w", path, name, err)
		}
		out["variable "+name] = fmt.Sprintf("size=%d constant=%v value=%x", v.Size(), v.Constant(), val)
	}
	return out, nil
}

func typeName(t btf.Type) string {
	if t == nil {
		return "-"
	}
	if n := t.TypeName(); n != "" {
		return n
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%v", t)
	return b.String()
}

func compare(committed, regenerated map[string]string) []string {
	var diff []string
	for k, v := range committed {
		if w, ok := regenerated[k]; !ok {
			diff = append(diff, fmt.Sprintf("%s: in the committed object only", k))
		} else if v != w {
			diff = append(diff, fmt.Sprintf("%s: committed %s, regenerated %s", k, v, w))
		}
	}
	for k := range regenerated {
		if _, ok := committed[k]; !ok {
			diff = append(diff, fmt.Sprintf("%s: in the regenerated object only", k))
		}
	}
	slices.Sort(diff)
	return diff
}
