package bfd

import (
	"net"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
)

// Counting a dropped packet never waits for the event loop: a reader goroutine keeps discarding
// a flood of bad packets while the loop is busy.
func TestDropDoesNotWaitForTheEventLoop(t *testing.T) {
	m, _ := startTestManager(t)
	release, busy := make(chan struct{}), make(chan struct{})
	go m.do(func() { close(busy); <-release })
	<-busy
	defer close(release)

	var versionZero []byte
	{
		p := pk{state: Up, your: 42}.bfd()
		p.Version = 0
		buf := gopacket.NewSerializeBuffer()
		if err := p.SerializeTo(buf, gopacket.SerializeOptions{}); err != nil {
			t.Fatal(err)
		}
		versionZero = buf.Bytes()
	}
	src := &net.UDPAddr{IP: net.ParseIP("192.0.2.1"), Port: minSrcPort}
	dst := net.ParseIP("192.0.2.100")
	const n = 1000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range n {
			m.drop(dropTTL) // what read4 and read6 do before decoding
			m.deliver([]byte{0x20}, src, dst, 1)
			m.deliver(versionZero, src, dst, 1)
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a reader goroutine is stuck behind the busy event loop counting dropped packets")
	}
	got := m.dropCounts()
	if got["ttl"] != n || got["malformed"] != n || got["version"] != n || len(got) != int(numDropCauses)-1 {
		t.Errorf("drop counts %v", got)
	}
}
