package classifier

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/egressd/egressd/bpf"
	"github.com/egressd/egressd/dataplane"
)

// Program values (frompod.c).
const (
	logAllow     = 1
	logDeny      = 2
	verdictPass  = 0 // VERDICT_*
	verdictAllow = 1
	verdictDeny  = 2
)

// aclLogging is what the log reader needs of the last Apply: per namespace id, its name and
// the severities its annotation asks for.
type aclLogging map[nsID]namespaceLog

type namespaceLog struct {
	namespace string
	log       dataplane.ACLLog
}

// logFlags are the program's flags for a namespace's ACL logging.
func logFlags(l dataplane.ACLLog) uint8 {
	var f uint8
	if l.Allow != "" {
		f |= logAllow
	}
	if l.Deny != "" {
		f |= logDeny
	}
	return f
}

// ServeACLLog writes every firewall verdict the program logged as an ACL log line in OVN's
// format (dataplane.ACLLogEntry.Line) to the Options' ACLLog, until Close; log gets its errors.
// It returns when the ring buffer is closed.
func (c *Classifier) ServeACLLog(log *slog.Logger) error {
	r, err := ringbuf.NewReader(c.objs.EgressdFwLog)
	if err != nil {
		return fmt.Errorf("read %s: %w", c.objs.EgressdFwLog, err)
	}
	c.readerMu.Lock()
	if c.closed {
		c.readerMu.Unlock()
		return r.Close()
	}
	c.logReader = r
	c.readerMu.Unlock()
	var e bpf.FromPodFwEvent
	for {
		rec, err := r.Read()
		if errors.Is(err, os.ErrClosed) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", c.objs.EgressdFwLog, err)
		}
		if err := binary.Read(bytes.NewReader(rec.RawSample), binary.NativeEndian, &e); err != nil {
			log.Debug("undecodable ACL log record", "err", err)
			continue
		}
		logging := c.logging.Load()
		if logging == nil {
			continue // before the first Apply: a predecessor's verdicts
		}
		ns := (*logging)[nsID(e.NsId)]
		verdict, severity := "allow", ns.log.Allow
		if e.Verdict == verdictDeny {
			verdict, severity = "drop", ns.log.Deny
		}
		if severity == "" || ns.namespace == "" {
			continue // logged under an earlier annotation
		}
		c.aclLog.Write(dataplane.ACLLogEntry{
			Name:    dataplane.ACLName(ns.namespace, int(e.Rule)),
			Verdict: verdict, Severity: severity, Proto: e.Proto,
			Src: eventAddr(e.Family, e.Src), Dst: eventAddr(e.Family, e.Dst), SrcPort: e.Sport, DstPort: e.Dport,
		})
	}
}

func eventAddr(family uint8, b [16]byte) netip.Addr {
	if family == 4 {
		return netip.AddrFrom4([4]byte(b[:4]))
	}
	return netip.AddrFrom16(b)
}
