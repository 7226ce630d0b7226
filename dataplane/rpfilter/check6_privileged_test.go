package rpfilter

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"

	"github.com/egressd/egressd/test/netns"
	"github.com/egressd/egressd/test/privileged"
)

// firewalld09 is firewalld's IPv6 reverse path filter before 1.0 (nftables backend, its
// default IPv6_rpfilter=yes): src/firewall/core/nftables.py, build_rpfilter_rules, in
// raw_PREROUTING (raw + 10), before conntrack and keyed without the mark; as `nft list` shows it
// on such a node, with its zone dispatch behind it.
const firewalld09 = `table inet firewalld {
	chain raw_PREROUTING {
		type filter hook prerouting priority raw + 10; policy accept;
		icmpv6 type { nd-router-advert, nd-neighbor-solicit } accept
		meta nfproto ipv6 fib saddr . iif oif missing drop
		jump raw_PREROUTING_ZONES
	}
	chain raw_PREROUTING_ZONES {
		goto raw_PRE_public
	}
	chain raw_PRE_public {
	}
}`

// firewalld10 is the same check since firewalld 1.0: keyed by the mark, at filter + 10.
const firewalld10 = `table inet firewalld {
	chain filter_PREROUTING {
		type filter hook prerouting priority filter + 10; policy accept;
		icmpv6 type { nd-router-advert, nd-neighbor-solicit } accept
		meta nfproto ipv6 fib saddr . mark . iif oif missing drop
	}
}`

// others are rules that are no IPv6 strict reverse path check (an IPv4 one, a loose one, one
// that only counts, one on the input hook, one in a chain no base chain reaches) and, reached
// through a jump, one that is (keyed by the mark, but before it is set).
const others = `table inet other {
	chain pre {
		type filter hook prerouting priority raw; policy accept;
		meta nfproto ipv4 fib saddr . iif oif missing drop
		fib saddr . mark oif missing drop
		fib saddr . iif oif missing counter
		jump deeper
	}
	chain deeper {
		fib saddr . mark . iif oif missing counter drop
	}
	chain input {
		type filter hook input priority filter; policy accept;
		fib saddr . iif oif missing drop
	}
	chain unreached {
		fib saddr . iif oif missing drop
	}
}`

// TestPrivilegedChecks6 installs, in a namespace, firewalld's IPv6 reverse path checks of before
// and since 1.0 and ip6tables' (-m rpfilter, x_tables inside nftables), and reads them back:
// those egressd cannot pass (keyed without the mark, or before the mark is set) are reported
// for any IPv6 path egressd routes through, the mark-keyed ones (firewalld 1.0's) only when a
// path the mark does not cover (a gateway's, the tunnel) is in use.
func TestPrivilegedChecks6(t *testing.T) {
	privileged.Require(t)
	ns := netns.New(t, "rpf6")
	nft := func(ruleset string) {
		t.Helper()
		cmd := ns.Command("nft", "-f", "-")
		cmd.Stdin = strings.NewReader(ruleset)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("nft: %v: %s", err, out)
		}
	}
	checks := func() []Check6 {
		t.Helper()
		var got []Check6
		if err := ns.Do(func() error {
			conn, err := nftables.New()
			if err != nil {
				return err
			}
			got, err = Checks6(conn)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	describe := func(cs []Check6) string {
		var out []string
		for _, c := range cs {
			out = append(out, fmt.Sprintf("%s/%s %s (%s %d)", c.Table, c.Chain, c.Kind(), c.Base, c.Priority))
		}
		return strings.Join(out, "; ")
	}
	expect := func(what string, got []Check6, want ...string) {
		t.Helper()
		if d := describe(got); d != strings.Join(want, "; ") {
			t.Errorf("%s:\n got %s\nwant %s", what, d, strings.Join(want, "; "))
		}
	}

	expect("an empty ruleset", checks())
	nft(others)
	expect("rules that are no IPv6 strict check, and one in a chain jumped to", checks(), "inet other/deeper fib_before_mark (pre -300)")
	if err := ns.Script("nft delete table inet other"); err != nil {
		t.Fatal(err)
	}

	// firewalld 1.0 and later, both backends: met, and reported only for the paths the mark
	// does not cover.
	nft(firewalld10)
	addRpfilter(t, ns, "mangle", xtRPFilterInvert|xtRPFilterValidMark)
	got := checks()
	expect("firewalld 1.0 (nftables; iptables: -t mangle --validmark)", got,
		"inet firewalld/filter_PREROUTING fib_mark (filter_PREROUTING 10)",
		"ip6 mangle/PREROUTING rpfilter_mark (PREROUTING -150)")
	expect("reported for secondary egress IPs' paths alone", Dropping(got, true, false))
	expect("reported for no IPv6 path", Dropping(got, false, false))
	expect("reported with a gateway's path", Dropping(got, true, true),
		"inet firewalld/filter_PREROUTING fib_mark (filter_PREROUTING 10)",
		"ip6 mangle/PREROUTING rpfilter_mark (PREROUTING -150)")
	if err := ns.Script("nft delete table inet firewalld", "nft delete table ip6 mangle"); err != nil {
		t.Fatal(err)
	}

	// firewalld before 1.0, both backends: never met.
	nft(firewalld09)
	addRpfilter(t, ns, "raw", xtRPFilterInvert)
	got = checks()
	want := []string{"inet firewalld/raw_PREROUTING fib_no_mark (raw_PREROUTING -290)", "ip6 raw/PREROUTING rpfilter_no_mark (PREROUTING -300)"}
	expect("firewalld 0.9 (nftables; iptables: -t raw without --validmark)", got, want...)
	expect("reported for secondary egress IPs' paths alone", Dropping(got, true, false), want...)
	expect("reported for no IPv6 path", Dropping(got, false, false))
	for _, c := range got {
		t.Logf("%s %s %s handle %d: %s; fix: %s", c.Table, c.Chain, c.Kind(), c.Handle, c.Rule(), c.Fix())
	}

	// ip6tables' rules as the kernel holds them, built here without the binary (x_tables'
	// rpfilter accepts only tables named raw or mangle): the same, and --loose or without
	// --invert is no strict check.
	built := func(flags byte) {
		t.Helper()
		if err := ns.Do(func() error {
			conn, err := nftables.New()
			if err != nil {
				return err
			}
			tbl := conn.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv6, Name: "mangle"})
			chain := conn.AddChain(&nftables.Chain{Table: tbl, Name: "pre", Type: nftables.ChainTypeFilter,
				Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRef(-100)})
			info := xt.Unknown([]byte{flags, 0, 0, 0, 0, 0, 0, 0}) // XT_ALIGN(sizeof(struct xt_rpfilter_info))
			conn.AddRule(&nftables.Rule{Table: tbl, Chain: chain, Exprs: []expr.Any{
				&expr.Match{Name: "rpfilter", Info: &info}, &expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop}}})
			return conn.Flush()
		}); err != nil {
			t.Fatal(err)
		}
	}
	built(xtRPFilterInvert | xtRPFilterLoose)
	built(xtRPFilterValidMark)
	built(xtRPFilterInvert | xtRPFilterValidMark)
	expect("with ip6 mangle's: --loose, without --invert, --validmark at -100", checks(), append(want[:1:1],
		"ip6 mangle/pre rpfilter_mark (pre -100)", want[1])...)
}

// addRpfilter adds `ip6tables -t table -A PREROUTING -m rpfilter <flags> -j DROP`, with the
// binary where it exists (then as iptables-nft writes it).
func addRpfilter(t *testing.T, ns *netns.NS, table string, flags byte) {
	t.Helper()
	if _, err := exec.LookPath("ip6tables"); err != nil {
		t.Logf("no ip6tables here: the rule is built as it would write it")
		prio := map[string]int{"raw": -300, "mangle": -150}[table]
		if err := ns.Do(func() error {
			conn, err := nftables.New()
			if err != nil {
				return err
			}
			tbl := conn.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv6, Name: table})
			chain := conn.AddChain(&nftables.Chain{Table: tbl, Name: "PREROUTING", Type: nftables.ChainTypeFilter,
				Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRef(nftables.ChainPriority(prio))})
			info := xt.Unknown([]byte{flags, 0, 0, 0, 0, 0, 0, 0})
			conn.AddRule(&nftables.Rule{Table: tbl, Chain: chain, Exprs: []expr.Any{
				&expr.Match{Name: "rpfilter", Info: &info}, &expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop}}})
			return conn.Flush()
		}); err != nil {
			t.Fatal(err)
		}
		return
	}
	args := []string{"-t", table, "-A", "PREROUTING", "-m", "rpfilter", "--invert"}
	if flags&xtRPFilterValidMark != 0 {
		args = append(args, "--validmark")
	}
	ns.MustRun(t, "ip6tables", append(args, "-j", "DROP")...)
}
