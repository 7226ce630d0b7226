package dataplane

import (
	"net/netip"
	"reflect"
	"testing"
)

// TestPodEqualComparesEveryField: two pods that differ in any one field are not Equal (a field
// added to Pod and left out of Equal fails here), and lists compare by content.
func TestPodEqualComparesEveryField(t *testing.T) {
	base := Pod{Origin: Origin{Kind: "Pod", Namespace: "a", Name: "p"}, IPs: []netip.Addr{netip.MustParseAddr("10.0.0.1")},
		QoSRules: []int{1}, Mark: 1, Spread: 2, HostInterfaces: []string{"veth0"}}
	same := base
	same.IPs, same.QoSRules, same.HostInterfaces = []netip.Addr{netip.MustParseAddr("10.0.0.1")}, []int{1}, []string{"veth0"}
	if !base.Equal(same) {
		t.Fatalf("equal pods with lists of their own compare unequal")
	}
	if !(Pod{}).Equal(Pod{IPs: []netip.Addr{}}) {
		t.Errorf("a nil and an empty list compare unequal")
	}
	v := reflect.ValueOf(&base).Elem()
	for i := range v.NumField() {
		other := base
		f := reflect.ValueOf(&other).Elem().Field(i)
		f.Set(reflect.Zero(f.Type())) // base has every field set
		if base.Equal(other) {
			t.Errorf("pods differing in %s compare equal", v.Type().Field(i).Name)
		}
	}
}
