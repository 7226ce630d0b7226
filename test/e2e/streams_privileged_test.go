package e2e

import (
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
)

// Destinations of streamLab's pod: its firewall allows the first and denies the second.
const streamAllowed, streamDenied = "203.0.113.10:80", "198.51.100.10:80"

// streamLab is a one-node lab whose pod may reach streamAllowed and nothing else outside the
// cluster, its firewall already enforced.
func streamLab(t *testing.T) (*lab.Lab, string, *lab.Pod) {
	t.Helper()
	l := lab.New(t, lab.Options{Nodes: 1, Agents: true})
	addExternals(t, l, []string{"web", "203.0.113.10"}, []string{"other", "198.51.100.10"})
	ns := l.CP.Namespace(t)
	p := addPod(t, l.Nodes[0], ns, "p", lab.PodOptions{})
	applyFirewall(t, l, ns, `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec:
  egress:
  - {type: Allow, to: {cidrSelector: 203.0.113.10/32}}
  - {type: Deny, to: {cidrSelector: 0.0.0.0/0}}`)
	poll.Eventually(t, "the firewall enforced", 10*time.Second, reach{p, streamDenied, false, lab.Timeout}.check)
	return l, ns, p
}

// checkStreamsThrough streams n datagrams, one every interval, from p to streamAllowed and to
// streamDenied while event runs, then checks that no allowed datagram went unanswered and no
// denied one was answered across it (what names the event in failures).
func checkStreamsThrough(t *testing.T, p *lab.Pod, n int, every time.Duration, what string, event func()) {
	t.Helper()
	var wg sync.WaitGroup
	var allowed, denied lab.StreamResult
	wg.Go(func() { allowed, _ = p.UDPStream(streamAllowed, n, every) })
	wg.Go(func() { denied, _ = p.UDPStream(streamDenied, n, every) })
	event()
	wg.Wait()
	t.Logf("allowed: %d/%d answered; denied: %d/%d answered", allowed.Answered, allowed.Sent, denied.Answered, denied.Sent)
	if allowed.Lost(n) {
		t.Errorf("allowed stream lost packets %s: %s", what, allowed)
	}
	if denied.Answered != 0 {
		t.Errorf("%d denied datagrams passed %s", denied.Answered, what)
	}
}
