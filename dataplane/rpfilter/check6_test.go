package rpfilter

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
	"golang.org/x/sys/unix"
)

// fakeRuleset is a ruleset as Checks6 reads it from the kernel.
type fakeRuleset struct {
	chains []*nftables.Chain
	rules  map[string][]*nftables.Rule // by "<table>/<chain>"
	failed map[string]error
	reads  map[string]int
}

func (f *fakeRuleset) ListChains() ([]*nftables.Chain, error) { return f.chains, nil }

func (f *fakeRuleset) GetRules(t *nftables.Table, c *nftables.Chain) ([]*nftables.Rule, error) {
	k := t.Name + "/" + c.Name
	f.reads[k]++
	return f.rules[k], f.failed[k]
}

// chain adds a chain (a base chain on hook at prio, when hook is set) with its rules, handles
// counting from 1.
func (f *fakeRuleset) chain(t *nftables.Table, name string, hook *nftables.ChainHook, prio int, rules ...[]expr.Any) {
	c := &nftables.Chain{Name: name, Table: t, Hooknum: hook}
	if hook != nil {
		c.Priority = nftables.ChainPriorityRef(nftables.ChainPriority(prio))
	}
	f.chains = append(f.chains, c)
	for i, exprs := range rules {
		f.rules[t.Name+"/"+name] = append(f.rules[t.Name+"/"+name], &nftables.Rule{Table: t, Chain: c, Handle: uint64(i + 1), Exprs: exprs})
	}
}

// strict is `[meta nfproto ipv6] fib saddr [. mark] . iif oif missing drop`.
func strict(mark bool) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV6}},
		&expr.Fib{Register: 1, FlagSADDR: true, FlagIIF: true, FlagMARK: mark, ResultOIF: true, FlagPRESENT: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0}},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}
}

func jump(kind expr.VerdictKind, chain string) []expr.Any {
	return []expr.Any{&expr.Verdict{Kind: kind, Chain: chain}}
}

func describe(cs []Check6) string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s/%s#%d %s (%s %d)", c.Table, c.Chain, c.Handle, c.Kind(), c.Base, c.Priority))
	}
	return strings.Join(out, "; ")
}

// TestChecks6FollowsJumpsFromPrerouting: the checks reported are those of ip6 and inet tables
// that a prerouting base chain reaches, itself or by jump and goto (through loops), each
// judged by the earliest base chain reaching it; those of chains nothing reaches, of other
// hooks and of ip tables are not. A chain whose rules cannot be read is an error, the others
// are still reported, sorted by table, chain and handle, and each chain is read once.
func TestChecks6FollowsJumpsFromPrerouting(t *testing.T) {
	f := &fakeRuleset{rules: map[string][]*nftables.Rule{}, failed: map[string]error{}, reads: map[string]int{}}
	inet := &nftables.Table{Family: nftables.TableFamilyINet, Name: "firewalld"}
	ip6 := &nftables.Table{Family: nftables.TableFamilyIPv6, Name: "raw"}
	ip := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: "raw"}
	f.chain(inet, "late", nftables.ChainHookPrerouting, 10, jump(expr.VerdictJump, "zones"))
	f.chain(inet, "pre", nftables.ChainHookPrerouting, -290, strict(false), jump(expr.VerdictJump, "zones"))
	f.chain(inet, "zones", nil, 0, jump(expr.VerdictGoto, "public"), strict(true))
	f.chain(inet, "public", nil, 0, jump(expr.VerdictJump, "zones"), strict(false))
	f.chain(inet, "unreached", nil, 0, strict(false))
	f.chain(inet, "input", nftables.ChainHookInput, 0, strict(false))
	f.chain(inet, "broken", nil, 0)
	f.chain(inet, "mangle", nftables.ChainHookPrerouting, -150, jump(expr.VerdictJump, "broken"))
	f.chain(ip6, "PREROUTING", nftables.ChainHookPrerouting, -300, strict(true))
	f.chain(ip, "PREROUTING", nftables.ChainHookPrerouting, -300, strict(false))
	f.failed["firewalld/broken"] = errors.New("interrupted")

	got, err := Checks6(f)
	want := "inet firewalld/pre#1 fib_no_mark (pre -290); inet firewalld/public#2 fib_no_mark (pre -290); " +
		"inet firewalld/zones#2 fib_before_mark (pre -290); ip6 raw/PREROUTING#1 fib_before_mark (PREROUTING -300)"
	if d := describe(got); d != want {
		t.Errorf("checks:\n got %s\nwant %s", d, want)
	}
	if err == nil || !strings.Contains(err.Error(), "inet broken: interrupted") {
		t.Errorf("error %v, want the unreadable chain's", err)
	}
	for k, n := range f.reads {
		if n != 1 {
			t.Errorf("%s read %d times", k, n)
		}
	}
}

// TestCheck6RecognizesStrictDroppingChecks: a rule is a check when it drops or rejects what a
// strict `fib saddr . iif oif` (compared with 0) or an inverted, not loose, x_tables rpfilter
// finds without a route back; keyed by the mark with `. mark` or --validmark. A loose lookup
// (no iif), one of the destination, one compared with an interface, one that only counts, and
// an inet rule for IPv4 are not.
func TestCheck6RecognizesStrictDroppingChecks(t *testing.T) {
	xtRule := func(flags byte) []expr.Any {
		info := xt.Unknown([]byte{flags, 0, 0, 0, 0, 0, 0, 0})
		return []expr.Any{&expr.Match{Name: "rpfilter", Info: &info}, &expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop}}
	}
	fib := func(f expr.Fib, cmp []byte, verdict expr.Any) []expr.Any {
		f.Register, f.ResultOIF = 1, true
		return []expr.Any{&f, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: cmp}, verdict}
	}
	drop, zero := &expr.Verdict{Kind: expr.VerdictDrop}, []byte{0, 0, 0, 0}
	v4 := append([]expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}}}, strict(false)[2:]...)
	for _, tc := range []struct {
		name   string
		fam    nftables.TableFamily
		exprs  []expr.Any
		ok     bool
		byMark bool
		xt     bool
	}{
		{"fib without mark", nftables.TableFamilyINet, strict(false), true, false, false},
		{"fib with mark", nftables.TableFamilyINet, strict(true), true, true, false},
		{"fib, oif 0, reject", nftables.TableFamilyIPv6, fib(expr.Fib{FlagSADDR: true, FlagIIF: true}, zero, &expr.Reject{}), true, false, false},
		{"loose fib", nftables.TableFamilyIPv6, fib(expr.Fib{FlagSADDR: true, FlagMARK: true}, zero, drop), false, false, false},
		{"fib daddr", nftables.TableFamilyIPv6, fib(expr.Fib{FlagSADDR: true, FlagDADDR: true, FlagIIF: true}, zero, drop), false, false, false},
		{"fib oif 3", nftables.TableFamilyIPv6, fib(expr.Fib{FlagSADDR: true, FlagIIF: true}, []byte{3, 0, 0, 0}, drop), false, false, false},
		{"fib that counts", nftables.TableFamilyIPv6, fib(expr.Fib{FlagSADDR: true, FlagIIF: true}, zero, &expr.Counter{}), false, false, false},
		{"inet IPv4", nftables.TableFamilyINet, v4, false, false, false},
		{"ip6 table, nfproto ipv4 never met", nftables.TableFamilyIPv6, v4, true, false, false},
		{"rpfilter --invert", nftables.TableFamilyIPv6, xtRule(xtRPFilterInvert), true, false, true},
		{"rpfilter --invert --validmark", nftables.TableFamilyIPv6, xtRule(xtRPFilterInvert | xtRPFilterValidMark), true, true, true},
		{"rpfilter --invert --loose", nftables.TableFamilyIPv6, xtRule(xtRPFilterInvert | xtRPFilterLoose), false, false, false},
		{"rpfilter without --invert", nftables.TableFamilyIPv6, xtRule(xtRPFilterValidMark), false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ok := check6(&nftables.Rule{Exprs: tc.exprs}, tc.fam)
			if ok != tc.ok || (ok && (c.ByMark != tc.byMark || c.Rpfilter != tc.xt)) {
				t.Errorf("check6 = %+v, %v; want ok %v, by mark %v, rpfilter %v", c, ok, tc.ok, tc.byMark, tc.xt)
			}
		})
	}
}

// TestCheck6Kind: a check keyed by the mark is met only strictly between MarkFrom and
// MarkUntil, where egressd's replies carry the mark; the kind says which, and which match.
func TestCheck6Kind(t *testing.T) {
	for _, tc := range []struct {
		c    Check6
		met  bool
		want string
	}{
		{Check6{ByMark: true, Priority: 0}, true, "fib_mark"},
		{Check6{ByMark: true, Priority: MarkFrom + 1}, true, "fib_mark"},
		{Check6{ByMark: true, Priority: MarkUntil - 1, Rpfilter: true}, true, "rpfilter_mark"},
		{Check6{ByMark: true, Priority: MarkFrom}, false, "fib_before_mark"},
		{Check6{ByMark: true, Priority: MarkUntil}, false, "fib_before_mark"},
		{Check6{ByMark: true, Priority: -300, Rpfilter: true}, false, "rpfilter_before_mark"},
		{Check6{Priority: 0}, false, "fib_no_mark"},
		{Check6{Priority: 0, Rpfilter: true}, false, "rpfilter_no_mark"},
	} {
		if got, met := tc.c.Kind(), tc.c.Met(); got != tc.want || met != tc.met {
			t.Errorf("%+v: kind %s, met %v; want %s, %v", tc.c, got, met, tc.want, tc.met)
		}
	}
}

// TestCheck6RuleAndFix: the log shows each check as its tool would write it, and the fix of
// its author: firewalld's setting for firewalld's table (either backend), the rule's own
// loosening otherwise.
func TestCheck6RuleAndFix(t *testing.T) {
	for _, tc := range []struct {
		c         Check6
		rule, fix string
	}{
		{Check6{Table: "inet firewalld", ByMark: true}, "fib saddr . mark . iif oif missing drop", "IPv6_rpfilter=loose"},
		{Check6{Table: "ip6 raw", Rpfilter: true}, "-m rpfilter --invert -j DROP", "add --loose"},
		{Check6{Table: "ip6 mangle", Rpfilter: true, ByMark: true}, "-m rpfilter --invert --validmark -j DROP", "IPv6_rpfilter=no"},
		{Check6{Table: "inet mine"}, "fib saddr . iif oif missing drop", "without iif"},
	} {
		if got := tc.c.Rule(); got != tc.rule {
			t.Errorf("%+v: rule %q, want %q", tc.c, got, tc.rule)
		}
		if got := tc.c.Fix(); !strings.Contains(got, tc.fix) {
			t.Errorf("%+v: fix %q, want it to say %q", tc.c, got, tc.fix)
		}
	}
}

// TestDropping: no check drops egressd's IPv6 traffic while it routes none off main's default
// route; with only marked paths (secondary networks' egress IPs) those it cannot meet do; with
// an unmarked path (a gateway's, the tunnel) every check does.
func TestDropping(t *testing.T) {
	checks := []Check6{{Chain: "met", ByMark: true, Priority: 10}, {Chain: "raw", ByMark: true, Priority: -300}, {Chain: "nomark", Priority: 10}}
	for _, tc := range []struct {
		paths, unmarked bool
		want            string
	}{
		{false, false, ""},
		{false, true, ""},
		{true, false, "raw nomark"},
		{true, true, "met raw nomark"},
	} {
		var got []string
		for _, c := range Dropping(checks, tc.paths, tc.unmarked) {
			got = append(got, c.Chain)
		}
		if g := strings.Join(got, " "); g != tc.want {
			t.Errorf("paths %v, unmarked %v: dropping %q, want %q", tc.paths, tc.unmarked, g, tc.want)
		}
	}
}
