package e2e

import (
	"bytes"
	"context"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedEgressIPEgressNodeRestart: the egress node's agent is killed and restarted while
// two pods send through its egress IP, one steered from another node and one on the egress
// node itself: a long-lived stream each, and new flows every 20 ms (a NAT binding is made per
// flow, so only new flows see a gap in the rules). No datagram is lost, every one reaches the
// web host with the egress IP (none with a pod's or a node's address), the IP stays on its node
// (status), and the restarted agent adopts the address instead of taking it down and up again
// (which would drop the neighbours' entries and the connections' replies for a moment).
func TestPrivilegedEgressIPEgressNodeRestart(t *testing.T) {
	privileged.Require(t)
	e := newEIPLab(t, 2)
	n0, n1 := e.Nodes[0], e.Nodes[1]
	app := map[string]string{"app": "eip"}
	steered, local := addPod(t, n0, e.ns, "steered", lab.PodOptions{Labels: app}), addPod(t, n1, e.ns, "local", lab.PodOptions{Labels: app})
	v4 := netip.MustParseAddr(eip4)
	name := e.egressIP(t, "restart", "eip", v4)
	placed := map[*lab.Node]netip.Addr{n1: v4}
	e.waitPlaced(t, name, 20*time.Second, placed)
	eventuallySource(t, "before the restart, from another node", steered, webAddr(v4), v4)
	eventuallySource(t, "before the restart, on the egress node", local, webAddr(v4), v4)

	// Every change of the egress node's addresses while the agent restarts.
	var changes bytes.Buffer
	monitor := n1.NS.Command("ip", "-o", "monitor", "address")
	monitor.Stdout = &changes
	if err := monitor.Start(); err != nil {
		t.Fatal(err)
	}
	capture := e.web.Capture()
	dst := lab.HostPort(web4, lab.ServerPorts[1])
	const count = 300
	pods := []*lab.Pod{steered, local}
	streams := make([]lab.StreamResult, len(pods))
	fresh := make([]map[string]int, len(pods)) // new flows by the source the web host saw, or outcome
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Go(func() { streams[i], _ = p.UDPStream(dst, count, 10*time.Millisecond) })
		fresh[i] = map[string]int{}
		wg.Go(func() {
			for end := time.Now().Add(2500 * time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
				r := p.UDP(webAddr(v4), lab.ClientOptions{Timeout: quick})
				seen := string(r.Outcome)
				if r.Outcome == lab.OK {
					seen = r.Seen.Src.String()
				}
				fresh[i][seen]++
			}
		})
	}
	time.Sleep(500 * time.Millisecond)
	n1.Agent.Kill()
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	if err := n1.StartAgent(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Logf("the egress node's agent back and ready %s after its restart", time.Since(start).Round(time.Millisecond))
	wg.Wait()
	time.Sleep(200 * time.Millisecond) // the last packets in flight
	capture.Stop()
	_ = monitor.Process.Kill()
	_ = monitor.Wait()

	for i, p := range pods {
		t.Logf("%s: %s across the restart; new flows: %v", p.Name, streams[i], fresh[i])
		if streams[i].Lost(count) {
			t.Errorf("%s's stream through the egress IP lost datagrams across the egress node's restart: %s", p.Name, streams[i])
		}
		if len(fresh[i]) != 1 || fresh[i][v4.String()] == 0 {
			t.Errorf("%s's new flows across the egress node's restart: %v, want all answered with source %s", p.Name, fresh[i], v4)
		}
	}
	stream := func(c lab.Captured) bool { return c.ForHost && c.Proto == "udp" && c.DstPort == lab.ServerPorts[1] }
	withIP := capture.Count(func(c lab.Captured) bool { return stream(c) && c.Src == v4 })
	other := capture.Count(func(c lab.Captured) bool { return stream(c) && c.Src != v4 })
	t.Logf("the web host got %d datagrams of the streams with the egress IP, %d with another source", withIP, other)
	if withIP < 2*count {
		t.Errorf("the web host got %d datagrams with the egress IP, want the streams' %d", withIP, 2*count)
	}
	if other > 0 {
		t.Errorf("%d datagrams of the streams reached the web host with another source than the egress IP", other)
	}
	for _, line := range strings.Split(changes.String(), "\n") {
		if strings.Contains(line, "Deleted") && strings.Contains(line, " "+v4.String()+"/") {
			t.Errorf("the restarted agent took the egress IP down: %s", line)
		}
	}
	e.stays(t, name, 2*time.Second, placed)
}
