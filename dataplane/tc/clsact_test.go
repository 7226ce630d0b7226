package tc

import (
	"testing"

	"github.com/vishvananda/netlink"
)

// TestOurs: a filter is egressd's (adopted, and removed by cleanup) only when it is a bpf filter
// at egressd's priority and handle running a program named egressd_*: a CNI's filter at another
// priority or handle, or another program at egressd's place, is left alone.
func TestOurs(t *testing.T) {
	bpfFilter := func(prio uint16, handle uint32, name string) *netlink.BpfFilter {
		return &netlink.BpfFilter{FilterAttrs: netlink.FilterAttrs{Priority: prio, Handle: handle}, Name: name}
	}
	for _, tc := range []struct {
		name string
		f    netlink.Filter
		want bool
	}{
		{"classifier", bpfFilter(Priority, filterHandle, ProgramName), true},
		{"port guard", bpfFilter(Priority, filterHandle, Port.program), true},
		{"a CNI's, priority 1", bpfFilter(1, filterHandle, ProgramName), false},
		{"another handle", bpfFilter(Priority, 2, ProgramName), false},
		{"another program", bpfFilter(Priority, filterHandle, "cil_from_container"), false},
		{"not bpf", &netlink.U32{FilterAttrs: netlink.FilterAttrs{Priority: Priority, Handle: filterHandle}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ours(tc.f); got != tc.want {
				t.Errorf("ours = %v, want %v", got, tc.want)
			}
		})
	}
}
