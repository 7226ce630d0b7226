package nft

import (
	"encoding/binary"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/egressd/egressd/dataplane"
)

// A test-only rendering of what Apply plans to write, so that the planning is reviewed as text
// (golden files) without a kernel: each non-empty set with its entries decoded as its key and
// data types say, the chains the verdict maps jump to, the jump targets and base chains in use,
// and what could not be planned. It decodes the kernel elements themselves, not the entries'
// change-detection data, so a wrong key or value shows.

// renderPlan renders the contents c and the failures of their planning.
func renderPlan(c contents, failed map[dataplane.Origin]error) string {
	var b strings.Builder
	known := map[string]bool{}
	for _, def := range setDefs {
		known[def.Name] = true
		if len(c[def.Name]) == 0 {
			continue
		}
		fmt.Fprintf(&b, "%s\n", setHeader(def))
		for _, id := range slices.Sorted(maps.Keys(c[def.Name])) {
			fmt.Fprintf(&b, "\t%s\n", renderEntry(def, kernelElements(def, id, c[def.Name][id])))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c)) {
		if !known[name] {
			fmt.Fprintf(&b, "unknown set %s: %d entries\n", name, len(c[name]))
		}
	}
	active := activeTargets(c)
	var bases []string
	for _, bc := range usedBaseChains(active) {
		bases = append(bases, bc.name)
	}
	fmt.Fprintf(&b, "dynamic chains: %s\n", list(dynamicChains(c)))
	fmt.Fprintf(&b, "jump targets: %s\n", list(active))
	fmt.Fprintf(&b, "base chains: %s\n", list(bases))
	for _, o := range slices.SortedFunc(maps.Keys(failed), func(a, b dataplane.Origin) int {
		return strings.Compare(fmt.Sprint(a, a.Rule), fmt.Sprint(b, b.Rule))
	}) {
		fmt.Fprintf(&b, "failed %s: %v\n", o, failed[o])
	}
	return b.String()
}

func list(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, " ")
}

// setHeader is like nft's: `map NAME (key : data)`, with its flags.
func setHeader(def *nftables.Set) string {
	kind, typ := "set", def.KeyType.Name
	if def.IsMap {
		kind, typ = "map", typ+" : "+def.DataType.Name
	}
	var flags []string
	if def.Interval {
		flags = append(flags, "interval")
	}
	if def.Counter {
		flags = append(flags, "counter")
	}
	if len(flags) > 0 {
		typ += "; " + strings.Join(flags, ", ")
	}
	return fmt.Sprintf("%s %s (%s)", kind, def.Name, typ)
}

// renderEntry renders an entry: one element, or an interval's start and end marker as a
// prefix or a range (no end marker: up to the family's last address).
func renderEntry(def *nftables.Set, els []nftables.SetElement) string {
	if !def.Interval {
		if len(els) != 1 {
			return fmt.Sprintf("<%d elements>", len(els))
		}
		return renderElement(def, els[0])
	}
	if len(els) == 0 || len(els) > 2 || els[0].IntervalEnd || len(els) == 2 && !els[1].IntervalEnd {
		return fmt.Sprintf("<malformed interval of %d elements>", len(els))
	}
	from, ok := netip.AddrFromSlice(els[0].Key)
	if !ok {
		return fmt.Sprintf("<bad start %x>", els[0].Key)
	}
	last := netip.IPv6Unspecified().Prev()
	if from.Is4() {
		last = netip.AddrFrom4([4]byte{255, 255, 255, 255})
	}
	if len(els) == 2 {
		end, ok := netip.AddrFromSlice(els[1].Key)
		if !ok || end.Is4() != from.Is4() || end.Compare(from) <= 0 {
			return fmt.Sprintf("<bad end %x of %s>", els[1].Key, from)
		}
		last = end.Prev()
	}
	for bits := 0; bits <= from.BitLen(); bits++ {
		if p := netip.PrefixFrom(from, bits); p.Masked().Addr() == from && lastAddr(p) == last {
			return p.String()
		}
	}
	return from.String() + "-" + last.String()
}

// renderElement renders one kernel element: its key, its data for a map, and whether it ends
// an interval.
func renderElement(def *nftables.Set, el nftables.SetElement) string {
	s := renderKey(def, el.Key)
	if def.IsMap {
		switch {
		case el.VerdictData != nil:
			s += " : " + renderVerdict(el)
		default:
			s += " : " + renderField(def.DataType, el.Val)
		}
	}
	if el.IntervalEnd {
		s = "end " + s
	}
	return s
}

func renderVerdict(el nftables.SetElement) string {
	v := el.VerdictData
	if v.Chain != "" {
		return fmt.Sprintf("%s %s", verdictNames[v.Kind], v.Chain)
	}
	return verdictNames[v.Kind]
}

var verdictNames = map[expr.VerdictKind]string{expr.VerdictContinue: "continue", expr.VerdictBreak: "break", expr.VerdictJump: "jump",
	expr.VerdictGoto: "goto", expr.VerdictReturn: "return", expr.VerdictDrop: "drop", expr.VerdictAccept: "accept"}

// renderKey decodes a key field by field; the fields of a concatenation are padded to 4 bytes.
func renderKey(def *nftables.Set, k []byte) string {
	types := []nftables.SetDatatype{def.KeyType}
	if def.Concatenation {
		types = nftables.ConcatSetTypeElements(def.KeyType)
	}
	var fields []string
	for _, typ := range types {
		n := int(typ.Bytes)
		if def.Concatenation {
			n = (n + 3) / 4 * 4
		}
		if n == 0 || len(k) < n {
			return fmt.Sprintf("<key %x too short for %s>", k, def.KeyType.Name)
		}
		fields = append(fields, renderField(typ, k[:typ.Bytes]))
		if pad := k[typ.Bytes:n]; strings.Trim(string(pad), "\x00") != "" {
			return fmt.Sprintf("<key %x: padding not zero>", k)
		}
		k = k[n:]
	}
	if len(k) != 0 {
		return fmt.Sprintf("<key with %d extra bytes>", len(k))
	}
	return strings.Join(fields, " . ")
}

var protocolNames = map[byte]string{1: "icmp", 6: "tcp", 17: "udp", 58: "ipv6-icmp", 132: "sctp"}

// renderField decodes one field of a key or a map's data, of type typ.
func renderField(typ nftables.SetDatatype, b []byte) string {
	switch typ.Name {
	case nftables.TypeIPAddr.Name, nftables.TypeIP6Addr.Name:
		if a, ok := netip.AddrFromSlice(b); ok && len(b) == int(typ.Bytes) {
			return a.String()
		}
	case nftables.TypeInetProto.Name:
		if p, ok := protocolNames[b[0]]; ok {
			return p
		}
		return fmt.Sprint(b[0])
	case nftables.TypeInetService.Name:
		return fmt.Sprint(binary.BigEndian.Uint16(b))
	case nftables.TypeMark.Name: // host byte order, as the rules load meta mark
		return fmt.Sprintf("0x%08x", binary.NativeEndian.Uint32(b))
	case nftables.TypeEtherAddr.Name:
		return net.HardwareAddr(b).String()
	case nftables.TypeIFName.Name:
		if i := strings.IndexByte(string(b), 0); i > 0 {
			return fmt.Sprintf("%q", b[:i])
		}
	}
	return fmt.Sprintf("<%s %x>", typ.Name, b)
}
