// Package dnsanswers reads the DNS answers to the pods of namespaces with dnsName rules on their
// way to them, and holds each until what it answered is in force. The dataplane queues them to
// an NFQUEUE (nftables chain dns_snoop: replies from port 53 of a connection the pod started,
// to a pod of such a namespace); this reader takes the addresses an answer gives a wanted name
// (its question, exact or under a wanted wildcard, through its CNAME chain) to the resolver
// (dnsnames.Resolver.Learn), and when one is new waits until a sync has applied it before it
// lets the answer go on. So the pod's first connection after its lookup is judged with the
// addresses it got, whatever the resolver answered the agent. Everything else passes at once:
// answers for names no rule wants, answers with nothing new, what is not DNS; and an answer
// held longer than Hold (a slow sync) passes too: a DNS answer is never lost because of egressd.
// With no reader on the queue (the agent down), the kernel lets the answers pass (bypass).
package dnsanswers

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/florianl/go-nfqueue/v2"
	"github.com/mdlayher/netlink"
	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressd/egressd/internal/dnsname"
)

// Learner keeps what answers give wanted names (dnsnames.Resolver).
type Learner interface {
	Wants(name string) bool
	Learn(namespace, name string, addrs []netip.Addr, ttl time.Duration) (gen uint64, fresh bool)
	WaitApplied(ctx context.Context, gen uint64) error
}

// Hold is the longest an answer waits for its addresses to be in force.
const Hold = 2 * time.Second

// maxHeld bounds the answers held at once; beyond, an answer is learned but not held.
const maxHeld = 1024

// Reader reads the answers of one queue.
type Reader struct {
	Queue   uint16
	Learner Learner
	// Namespace is the namespace of the local pod of an address whose answers are queued (those
	// of the dataplane's DNSSnoop.Pods): what an answer teaches counts against it.
	Namespace func(pod netip.Addr) string
	Log       *slog.Logger
	Metrics   *Metrics

	held    chan struct{} // a slot per answer held
	streams streams
}

// Run reads the queue until ctx ends.
func (r *Reader) Run(ctx context.Context) error {
	r.held = make(chan struct{}, maxHeld)
	q, err := nfqueue.Open(&nfqueue.Config{
		NfQueue: r.Queue, MaxPacketLen: 0xffff, MaxQueueLen: 4096, Copymode: nfqueue.NfQnlCopyPacket,
		// The kernel lets packets pass rather than drop them when the queue is full.
		Flags: nfqueue.NfQaCfgFlagFailOpen, WriteTimeout: time.Second,
	})
	if err != nil {
		return fmt.Errorf("open NFQUEUE %d for DNS answers: %w", r.Queue, err)
	}
	defer q.Close()
	// A full socket buffer must not end the reader: the kernel then lets packets pass (fail
	// open), and the next ones are read.
	if err := q.SetOption(netlink.NoENOBUFS, true); err != nil {
		r.Log.Warn("NFQUEUE: ENOBUFS not ignored", "err", err)
	}
	err = q.RegisterWithErrorFunc(ctx, func(a nfqueue.Attribute) int {
		if a.PacketID == nil {
			return 0
		}
		var payload []byte
		if a.Payload != nil {
			payload = *a.Payload
		}
		r.judge(ctx, q, *a.PacketID, payload)
		return 0
	}, func(e error) int {
		if ctx.Err() != nil {
			return 1
		}
		r.Log.Error("reading DNS answers from NFQUEUE", "queue", r.Queue, "err", e)
		return 0
	})
	if err != nil {
		return fmt.Errorf("read NFQUEUE %d: %w", r.Queue, err)
	}
	r.Log.Info("reading DNS answers to pods", "queue", r.Queue)
	<-ctx.Done()
	return nil
}

// judge learns from one packet and lets it go on, at once or once what it taught is in force.
func (r *Reader) judge(ctx context.Context, q *nfqueue.Nfqueue, id uint32, packet []byte) {
	pass := func(result string) {
		r.Metrics.answers.WithLabelValues(result).Inc()
		if err := q.SetVerdict(id, nfqueue.NfAccept); err != nil && ctx.Err() == nil {
			r.Log.Error("let a DNS answer go on", "err", err)
		}
	}
	msgs, pod, err := r.messages(packet)
	if err != nil || len(msgs) == 0 {
		if err != nil && !errors.Is(err, errNoMessage) {
			r.Log.Debug("not a DNS answer egressd reads", "err", err)
		}
		pass("unparsed")
		return
	}
	// A TCP segment may end several messages (pipelined answers): it waits for the newest.
	var gen uint64
	var names []string
	result := "ignored"
	for _, m := range msgs {
		name, addrs, ttl, ok := r.wanted(m)
		if !ok {
			continue
		}
		g, fresh := r.Learner.Learn(r.Namespace(pod), name, addrs, time.Duration(ttl)*time.Second)
		if fresh {
			gen, names = max(gen, g), append(names, name)
		} else if result == "ignored" {
			result = "known"
		}
	}
	if len(names) == 0 {
		pass(result)
		return
	}
	select {
	case r.held <- struct{}{}:
	default:
		pass("not_held") // too many held at once
		return
	}
	start := time.Now()
	go func() {
		defer func() { <-r.held }()
		hctx, cancel := context.WithTimeout(ctx, Hold)
		defer cancel()
		result := "learned"
		if r.Learner.WaitApplied(hctx, gen) != nil {
			result = "hold_expired"
			r.Log.Warn("a DNS answer's addresses were not in force within the hold; let it go on", "names", names, "hold", Hold)
		}
		r.Metrics.hold.Observe(time.Since(start).Seconds())
		pass(result)
	}()
}

// wanted is the question's name and what the answer gives it, when it is a successful answer
// to one question for a wanted name.
func (r *Reader) wanted(m *dns.Msg) (string, []netip.Addr, uint32, bool) {
	if !m.Response || m.Opcode != dns.OpcodeQuery || m.Rcode != dns.RcodeSuccess || len(m.Question) != 1 {
		return "", nil, 0, false
	}
	q := m.Question[0]
	if q.Qclass != dns.ClassINET || (q.Qtype != dns.TypeA && q.Qtype != dns.TypeAAAA && q.Qtype != dns.TypeANY) {
		return "", nil, 0, false
	}
	name := dnsname.Canonical(q.Name)
	if !r.Learner.Wants(name) {
		return "", nil, 0, false
	}
	addrs, ttl := dnsname.Answered(name, m.Answer)
	return name, addrs, ttl, len(addrs) > 0
}

var errNoMessage = errors.New("no DNS message")

// messages are the DNS messages an IPv4 or IPv6 packet from port 53 completes: a UDP datagram's
// payload, or those a TCP segment completes, after their length, with the segments before it on
// the same connection (streams); and the packet's destination, the pod.
func (r *Reader) messages(packet []byte) ([]*dns.Msg, netip.Addr, error) {
	msgs, err := r.parse(packet)
	if len(msgs) == 0 {
		return msgs, netip.Addr{}, err
	}
	var pod netip.Addr
	if packet[0]>>4 == 4 {
		pod = netip.AddrFrom4([4]byte(packet[16:20]))
	} else {
		pod = netip.AddrFrom16([16]byte(packet[24:40]))
	}
	return msgs, pod, err
}

// parse is messages without the destination.
func (r *Reader) parse(packet []byte) ([]*dns.Msg, error) {
	if len(packet) < 1 {
		return nil, errNoMessage
	}
	var proto byte
	var l4, addrs []byte
	switch packet[0] >> 4 {
	case 4:
		ihl := int(packet[0]&0x0f) * 4
		if len(packet) < 20 || ihl < 20 || len(packet) < ihl {
			return nil, errors.New("IPv4 header cut short")
		}
		if binary.BigEndian.Uint16(packet[6:8])&0x3fff != 0 {
			return nil, errors.New("a fragment")
		}
		proto, l4, addrs = packet[9], packet[ihl:], packet[12:20]
	case 6:
		if len(packet) < 40 {
			return nil, errors.New("IPv6 header cut short")
		}
		proto, l4, addrs = packet[6], packet[40:], packet[8:40] // resolvers send no extension headers
	default:
		return nil, errNoMessage
	}
	var payloads [][]byte
	switch proto {
	case 17: // UDP
		if len(l4) < 8 {
			return nil, errors.New("UDP header cut short")
		}
		payloads = [][]byte{l4[8:]}
	case 6: // TCP
		if len(l4) < 20 || len(l4) < int(l4[12]>>4)*4 {
			return nil, errors.New("TCP header cut short")
		}
		key := flowKey(string(addrs) + string(l4[:4]))
		payloads = r.streams.add(key, binary.BigEndian.Uint32(l4[4:8]), l4[int(l4[12]>>4)*4:], time.Now())
	default:
		return nil, errNoMessage
	}
	var out []*dns.Msg
	for _, p := range payloads {
		m := new(dns.Msg)
		if err := m.Unpack(p); err != nil {
			return out, fmt.Errorf("DNS message: %w", err)
		}
		out = append(out, m)
	}
	return out, nil
}

// Metrics count the answers read.
type Metrics struct {
	answers *prometheus.CounterVec
	hold    prometheus.Histogram
}

// NewMetrics returns the reader's metrics, to register.
func NewMetrics() *Metrics {
	return &Metrics{
		answers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressd_dns_answers_total",
			Help: "DNS answers to pods of namespaces with dnsName rules, read on their way, by result: learned (new addresses for a wanted name, held until in force), known (nothing new), ignored (a name no rule wants, or no address), unparsed (not a DNS answer egressd reads: a TCP segment in the middle of a message, or after a gap, among them), hold_expired (let go after the hold without its addresses in force), not_held (too many held at once).",
		}, []string{"result"}),
		hold: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "egressd_dns_answer_hold_seconds",
			Help:    "How long a DNS answer with new addresses was held until they were in force.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2},
		}),
	}
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.answers, m.hold}
}
