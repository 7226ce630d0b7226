package nft

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/dataplane"
)

// TestDropLog: the drops after DNAT become ACL log lines from the deny elements' counters: a
// line per dropped packet, within a bucket per rule (one rule's flood does not silence
// another's), nothing for a namespace that does not ask, and no old drops when logging starts
// or a counter restarts.
func TestDropLog(t *testing.T) {
	pod, backend := netip.MustParseAddr("10.244.0.5"), netip.MustParseAddr("203.0.113.10")
	origin := func(rule int) dataplane.Origin {
		return dataplane.Origin{Kind: "EgressFirewall", Namespace: "a", Name: "default", Rule: rule}
	}
	deny := func(rule int, port uint16, log string) dataplane.BackendDeny {
		return dataplane.BackendDeny{Origin: origin(rule), Pod: pod, Backend: backend, Protocol: 6, Port: port, Log: log}
	}
	denies := map[string]dataplane.BackendDeny{}
	for _, d := range []dataplane.BackendDeny{deny(1, 80, "alert"), deny(1, 81, "alert"), deny(2, 82, "alert"), deny(3, 83, "")} {
		denies[string(denyKey(d))] = d
	}
	key := func(port uint16) string {
		for k, d := range denies {
			if d.Port == port {
				return k
			}
		}
		panic(port)
	}
	var out strings.Builder
	w := dataplane.NewACLLogWriter(&out)
	l := newDropLog()
	l.track(nil, denies, true)
	now := time.Unix(1000, 0)
	read := map[string]Counters{key(80): {Packets: 30}, key(81): {Packets: 30}, key(82): {Packets: 3}, key(83): {Packets: 9}}
	if !l.logging(denies) {
		t.Fatal("no element logs")
	}
	l.log(denies, read, w, 5, now)
	count := func(s string) int { return strings.Count(out.String(), s) }
	if n := count(`name="EF:a:9999", verdict=drop`); n != 5 {
		t.Errorf("rule 1 (60 drops, two elements): %d lines, want 5 (the burst):\n%s", n, out.String())
	}
	if n := count(`name="EF:a:9998", verdict=drop`); n != 3 {
		t.Errorf("rule 2 (3 drops): %d lines, want 3:\n%s", n, out.String())
	}
	if n := count(`EF:a:9997`); n != 0 {
		t.Errorf("rule 3 (no logging): %d lines", n)
	}
	if want := `|acl_log(egressd)|INFO|name="EF:a:9998", verdict=drop, severity=alert, direction=to-lport: tcp,nw_src=10.244.0.5,nw_dst=203.0.113.10,tp_dst=82` + "\n"; count(want) != 3 {
		t.Errorf("lines lack %q:\n%s", want, out.String())
	}

	// A second later: rule 1 earned 5 tokens; only new drops count.
	out.Reset()
	read[key(80)] = Counters{Packets: 31}
	read[key(82)] = Counters{Packets: 4}
	l.log(denies, read, w, 5, now.Add(time.Second))
	if n, m := count(`EF:a:9999`), count(`EF:a:9998`); n != 1 || m != 1 {
		t.Errorf("after one more drop each: %d and %d lines, want 1 and 1:\n%s", n, m, out.String())
	}

	// Logging starts for rule 3: its earlier drops are not logged, later ones are.
	out.Reset()
	d := denies[key(83)]
	d.Log = "warning"
	denies[key(83)] = d
	l.log(denies, read, w, 5, now.Add(2*time.Second))
	read[key(83)] = Counters{Packets: 11}
	l.log(denies, read, w, 5, now.Add(3*time.Second))
	if n := count(`name="EF:a:9997", verdict=drop, severity=warning`); n != 2 {
		t.Errorf("rule 3 after logging started: %d lines, want 2 (its new drops):\n%s", n, out.String())
	}

	// The table was written again: counters restart at 0.
	out.Reset()
	l.track(denies, denies, true)
	read = map[string]Counters{key(82): {Packets: 1}}
	l.log(denies, read, w, 5, now.Add(4*time.Second))
	if n := count(`EF:a:9998`); n != 1 {
		t.Errorf("after a rewrite, one drop: %d lines, want 1:\n%s", n, out.String())
	}
}
