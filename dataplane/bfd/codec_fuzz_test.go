package bfd

import (
	"bytes"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// FuzzReceive feeds arbitrary bytes through what a received datagram goes through: decode,
// RFC 5880 validation, and the state machine in every state. The seed corpus in
// testdata/fuzz/FuzzReceive is real FRR 8.4 bfdd packets (Down, Init, Up, Poll, Final, AdminDown,
// IPv4 and IPv6). Run longer with: go test ./dataplane/bfd -fuzz FuzzReceive.
func FuzzReceive(f *testing.F) {
	f.Add(make([]byte, 24))
	f.Fuzz(func(t *testing.T, data []byte) {
		var p layers.BFD
		if err := p.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil {
			return
		}
		if int(data[3]) != len(p.Contents) || len(p.Contents) > len(data) {
			t.Fatalf("decoded %d bytes of a packet whose length field is %d", len(p.Contents), data[3])
		}
		if !p.AuthPresent && len(p.Contents) == 24 {
			// A plain packet survives a round trip bit for bit.
			buf := gopacket.NewSerializeBuffer()
			if err := p.SerializeTo(buf, gopacket.SerializeOptions{}); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), data[:24]) {
				t.Fatalf("round trip\n%x\n%x", data[:24], buf.Bytes())
			}
		}
		if dropReason(&p) != dropNone {
			return
		}
		for _, st := range []State{AdminDown, Down, Init, Up} {
			s := sessionIn(st)
			s.receive(&p, t0.Add(ms))
			if s.state > Up {
				t.Fatalf("invalid state %d", s.state)
			}
			if s.state == Up && s.txInterval() == 0 && s.remoteMinRx != 0 {
				t.Fatal("zero transmit interval while Up")
			}
			s.expire(t0.Add(ms + s.detectionTime()))
			out := s.packet(s.owesFinal)
			if out.Poll && out.Final {
				t.Fatal("packet with both Poll and Final")
			}
		}
	})
}

// Decoding a received packet allocates nothing: garbage cannot make the receive path churn.
func TestDecodeDoesNotAllocate(t *testing.T) {
	pkt := pk{state: Up, your: 42}.bfd()
	buf := gopacket.NewSerializeBuffer()
	if err := pkt.SerializeTo(buf, gopacket.SerializeOptions{}); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	var p layers.BFD
	allocs := testing.AllocsPerRun(1000, func() {
		if err := p.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil || dropReason(&p) != dropNone {
			t.Fatal("valid packet rejected")
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per decode", allocs)
	}
}
