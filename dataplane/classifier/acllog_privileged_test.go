package classifier_test

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/classifier"
	"github.com/egressd/egressd/test/poll"
)

// lockedBuffer is a bytes.Buffer safe for a logger writing while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestPrivilegedClassifierACLLog: with {"deny": "alert", "allow": "notice"}, verdicts are
// logged as ovn-controller's acl_log lines (name="EF:<ns>:<priority>", verdict, severity,
// direction, then the packet): every denied packet, an allowed one only when it opens a
// connection (a TCP SYN; the ACKs that follow are not logged), each rule within its own rate
// limit (its default, 20, or as set; 0 logs nothing), so that one rule's flood does not
// silence another's.
func TestPrivilegedClassifierACLLog(t *testing.T) {
	for _, rate := range []uint32{classifier.DefaultACLLogRate, 5, 0} {
		t.Run(fmt.Sprintf("rate-%d", rate), func(t *testing.T) {
			var out lockedBuffer
			c := loadWith(t, classifier.Options{ACLLogRate: rate, ACLLog: dataplane.NewACLLogWriter(&out)})
			st := firewallState()
			st.Firewalls[0].Rules = []dataplane.FirewallRule{
				{Index: 0, Prefixes: pfxs("192.0.2.0/24"), Ports: []dataplane.Port{{Protocol: 6, Port: 443}}},
				{Index: 1, Prefixes: pfxs("198.51.100.7/32")},
				{Index: 2, Deny: true, Prefixes: pfxs("203.0.113.0/24")},
				{Index: 3, Deny: true, Prefixes: pfxs("0.0.0.0/0", "::/0")},
			}
			st.Firewalls[0].Log = dataplane.ACLLog{Deny: "alert", Allow: "notice"}
			if failed := c.Apply(st, nil, nil); len(failed) > 0 {
				t.Fatal(failed)
			}
			in, err := classifier.Inspect(fmt.Sprintf("/sys/fs/bpf/egressd-test-classifier-%d", os.Getpid()))
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			if tr, err := in.Trace(podA, netip.MustParseAddr("203.0.113.1"), 6, 443); err != nil || !tr.Logged {
				t.Errorf("trace of a denied flow: %+v (%v), want logged", tr, err)
			}
			go func() {
				if err := c.ServeACLLog(slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
					t.Error(err)
				}
			}()
			denied := pkt(t, podA, netip.MustParseAddr("203.0.113.1"), "tcp", 443, 0, false) // rule 2
			denied3 := pkt(t, podA, netip.MustParseAddr("192.0.2.1"), "tcp", 80, 0, false)   // rule 3
			syn := pkt(t, podA, netip.MustParseAddr("198.51.100.7"), "tcp", 443, 0, false)   // rule 1
			ack := pkt(t, podA, netip.MustParseAddr("198.51.100.7"), "tcp-ack", 443, 0, false)
			for i := range 30 {
				run(t, c, denied)
				run(t, c, denied3)
				if i < 3 {
					run(t, c, syn)
				}
				run(t, c, ack)
			}
			names := map[string]int{`name="EF:a:9998", verdict=drop`: int(rate), `name="EF:a:9997", verdict=drop`: int(rate),
				`name="EF:a:9999", verdict=allow`: min(3, int(rate))}
			count := func() map[string]int {
				n := map[string]int{}
				for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
					for name := range names {
						if strings.Contains(l, name) {
							n[name]++
						}
					}
				}
				return n
			}
			poll.Eventually(t, "each rule's burst logged", 2*time.Second, func() error {
				got := count()
				for name, want := range names {
					if got[name] < want {
						return fmt.Errorf("%d lines with %s, want %d", got[name], name, want)
					}
				}
				return nil
			})
			// Lines beyond the bursts would arrive within this; it cannot be an observable,
			// since what is awaited is that nothing more comes.
			time.Sleep(200 * time.Millisecond)
			got := count()
			for name, want := range names {
				extra := 2 // a token or two may be earned meanwhile
				if rate == 0 || want < int(rate) {
					extra = 0 // no token is ever earned, or the packets were fewer than the burst
				}
				if got[name] < want || got[name] > want+extra {
					t.Errorf("%d lines with %s, want %d:\n%s", got[name], name, want, out.String())
				}
			}
			if rate == 0 {
				return
			}
			want := `|acl_log(egressd)|INFO|name="EF:a:9998", verdict=drop, severity=alert, direction=to-lport: tcp,nw_src=` + podA.String() + ",nw_dst=203.0.113.1,tp_src=40000,tp_dst=443\n"
			if !strings.Contains(out.String(), want) {
				t.Errorf("no line ends with %q:\n%s", want, out.String())
			}
			if allow := `name="EF:a:9999", verdict=allow, severity=notice, direction=to-lport: tcp,`; !strings.Contains(out.String(), allow) {
				t.Errorf("no line with %q:\n%s", allow, out.String())
			}
		})
	}
}
