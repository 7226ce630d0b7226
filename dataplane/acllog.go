package dataplane

import (
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"
)

// ACLName is upstream's name of the ACL of a namespace's EgressFirewall rule (index rule):
// EF:<namespace>:<priority>, the priority being 10000 - rule.
func ACLName(namespace string, rule int) string {
	return fmt.Sprintf("EF:%s:%d", namespace, 10000-rule)
}

// ACLLogEntry is one logged EgressFirewall verdict.
type ACLLogEntry struct {
	// Name is upstream's ACL name, EF:<namespace>:<priority>.
	Name     string
	Verdict  string // allow or drop
	Severity string // the namespace's k8s.ovn.org/acl-logging severity for the verdict
	Proto    uint8
	Src, Dst netip.Addr
	// SrcPort and DstPort are the transport ports; 0 is not known (no ports, or a drop counted
	// after DNAT, whose source port the counter does not keep).
	SrcPort, DstPort uint16
}

// Line is the entry as ovn-controller's acl_log module writes it, so that what parses OVN's
// ACL log (upstream's e2e greps acl_log lines for name="...", verdict=..., severity=...) reads
// egressd's the same way:
//
//	<time>|<seq>|acl_log(egressd)|INFO|name="EF:ns:9999", verdict=drop, severity=alert, direction=to-lport: tcp,nw_src=10.244.0.5,nw_dst=203.0.113.10,tp_src=40000,tp_dst=80
//
// The packet part is OVS's flow format reduced to the fields egressd knows: the protocol
// (tcp6, udp6, ... for IPv6; ip/ipv6 with nw_proto for others), addresses, ports.
func (e ACLLogEntry) Line(t time.Time, seq uint64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%05d|acl_log(egressd)|INFO|name=%q, verdict=%s, severity=%s, direction=to-lport: ",
		t.UTC().Format("2006-01-02T15:04:05.000Z"), seq%100000, e.Name, e.Verdict, e.Severity)
	v6 := e.Src.Is6() && !e.Src.Is4In6()
	name := map[uint8]string{6: "tcp", 17: "udp", 132: "sctp", 1: "icmp", 58: "icmp"}[e.Proto]
	switch {
	case name == "":
		if v6 {
			fmt.Fprintf(&b, "ipv6,nw_proto=%d", e.Proto)
		} else {
			fmt.Fprintf(&b, "ip,nw_proto=%d", e.Proto)
		}
	case v6:
		b.WriteString(name + "6")
	default:
		b.WriteString(name)
	}
	if v6 {
		fmt.Fprintf(&b, ",ipv6_src=%s,ipv6_dst=%s", e.Src, e.Dst)
	} else {
		fmt.Fprintf(&b, ",nw_src=%s,nw_dst=%s", e.Src.Unmap(), e.Dst.Unmap())
	}
	if e.SrcPort != 0 {
		fmt.Fprintf(&b, ",tp_src=%d", e.SrcPort)
	}
	if e.DstPort != 0 {
		fmt.Fprintf(&b, ",tp_dst=%d", e.DstPort)
	}
	b.WriteByte('\n')
	return b.String()
}

// ACLLogWriter writes ACL log lines, one Write per line, numbered in order (the classifier's verdicts
// and the drops after DNAT share one).
type ACLLogWriter struct {
	mu  sync.Mutex
	w   io.Writer
	seq uint64
	now func() time.Time
}

// NewACLLogWriter writes to w.
func NewACLLogWriter(w io.Writer) *ACLLogWriter { return &ACLLogWriter{w: w, now: time.Now} }

// StderrACLLog is the agent's ACL log: its standard error, next to its own log, as
// ovn-controller's acl_log lines are in its log.
var StderrACLLog = NewACLLogWriter(os.Stderr)

// Write writes e.
func (l *ACLLogWriter) Write(e ACLLogEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	_, _ = io.WriteString(l.w, e.Line(l.now(), l.seq))
}
