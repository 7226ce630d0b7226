package dataplane

import (
	"strings"
	"testing"
)

func TestCheckMarkMask(t *testing.T) {
	for mask, want := range map[uint32]string{
		DefaultMarkMask: "",
		0xff000000:      "",
		0x000000ff:      "",
		0x00300000:      "",
		0:               "no bits",
		0x00ff00ff:      "not one run",
		0x00010001:      "not one run",
		0x00000300:      "Cilium's magic marks",
		0x0000c000:      "kube-proxy's masquerade mark",
		0x00018000:      "kube-proxy's drop mark",
	} {
		err := CheckMarkMask(mask)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("%#x: %v, want %q", mask, err, want)
		}
	}
}
