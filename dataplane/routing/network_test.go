package routing

import "testing"

func TestResolveTable(t *testing.T) {
	rt := "#\n# reserved values\n#\n255\tlocal\n254\tmain\n0\tunspec\n100 blue # the blue network\n0x65 green\n"
	vrf := func(dev string) (uint32, bool) { return map[string]uint32{"vrf-red": 1010}[dev], dev == "vrf-red" }
	for _, tc := range []struct {
		in   string
		want uint32
		err  bool
	}{
		{"100", 100, false}, {"4000000000", 4000000000, false}, {"blue", 100, false}, {"green", 0x65, false},
		{"main", 254, false}, {"vrf-red", 1010, false}, {"unspec", 0, true}, {"0", 0, true}, {"", 0, true}, {"red", 0, true},
	} {
		got, err := resolveTable(tc.in, rt, vrf)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("resolveTable(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}
