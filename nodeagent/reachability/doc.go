// Package reachability tells the leader which nodes can host egress IPs (EgressIP) and
// elected services (EgressService): the node-reachability half of upstream OVN-Kubernetes'
// health check, made fast.
//
// # What upstream does
//
// Every node serves grpc.health.v1 with the service "Service_Egress_IP" SERVING on port 9107;
// the cluster-manager sends one Check per node every 5 s and tolerates one failure, so a dead
// node loses its egress IPs after 5-11 s. egressd serves the same thing ([Server]), so that
// upstream-style probes keep working, but judges reachability ([Prober]) in two layers.
//
// # Layer 1: does the host answer at all? (kernel, fast)
//
// Every [Config.Interval] (150 ms) the prober opens a TCP connection to the health port with
// the interval as timeout, and aborts it at once (RST, so the leader keeps no TIME_WAIT). The
// handshake is answered by the target's kernel from the listening socket's queue: the agent
// process is not involved, so a starved agent still answers in RTT time (measured: a spinning
// agent limited to 1% CPU, or one stopped with SIGSTOP, answered every handshake for 10 s). On
// the leader's side the outcome is read from the socket's kernel state when the wait ends, so a
// starved leader that wakes late does not take a completed handshake for a timeout. Outcomes:
//   - answered (SYN-ACK): kernel and the agent's listening socket are alive;
//   - refused (RST): the kernel is alive, nobody listens: the agent is restarting;
//   - silent (timeout, host/net unreachable): link, host or kernel dead.
//
// [Config.Misses] (3) silent probes in a row make the node unreachable. Detection of a dead
// link therefore takes between 2 and 3 intervals plus one timeout: 450-600 ms with the defaults
// (BenchmarkPrivilegedLinkDownDetection, two runs of 10 trials: 453 to 598 ms). A refused probe is an answer: it never counts as a
// miss. Local errors of the leader (no file descriptors, ...) count neither way, so that the
// leader's own trouble does not fail every node over.
//
// Numbers: a datacenter RTT is well below 2 ms, so a 150 ms timeout is two orders of magnitude
// of headroom; a lost SYN costs one miss (its retransmission comes after 1 s, too late), so a
// false verdict needs three consecutive losses, p^3 (1e-9 at 0.1% loss). The cost is about 7
// handshakes per second per node on both ends, which the kernel does in microseconds;
// halving the interval halves the detection time and doubles that cost.
//
// # Layer 2: is the agent serving? (userspace, slow, with a grace period)
//
// Once a second the prober sends a health Check over one long-lived gRPC connection (1 s
// deadline, reconnect backoff capped at 1 s, TCP_USER_TIMEOUT 2 s so that a connection whose
// peer vanished is dropped and redialled instead of waiting out TCP's exponential retransmit
// backoff). A node whose agent has not answered SERVING for [Config.Grace] (30 s) is
// unreachable even though its kernel answers: the agent is gone, hung or says NOT_SERVING.
// The grace covers a rolling upgrade (a few seconds of RST) and a saturated CPU (Checks time
// out while handshakes still complete): neither fails the node over, because the egress
// addresses, routes and programs stay in the kernel while the agent is away.
//
// # Verdicts
//
// A node is unreachable when layer 1 has [Config.Misses] silent probes in a row, or layer 2 has
// seen no SERVING for [Config.Grace]. It becomes reachable again after as many answered probes
// in a row and a SERVING received after it was declared unreachable: a node coming back is
// only used once its agent runs. A node added by [Prober.Set] starts reachable with a full
// grace period, so that a new leader does not move every egress IP away before it has measured
// anything; a dead one is found out within the detection time like any other.
//
// # What the server accepts
//
// The [Server] answers anything that reaches the node, so it serves only what the protocol
// needs (health Check; Watch and List answer Unimplemented) and the agents' pod announcements,
// within limits a caller cannot exceed: 16 RPCs at once per connection, 64 KiB messages, 16 KiB
// of metadata, 5 s to finish the HTTP/2 handshake, GOAWAY after 30 s without RPCs and after 5
// min in any case, and 8 open connections per peer address, 256 in all (the others are reset
// at once and counted in egressd_reachability_connections_refused_total). The leader needs one
// connection per node; its connect probes leave at once and never count against it
// (TestLoopbackProbesWithinLimits). Authentication is not the server's: a crowd of 32 addresses
// can still fill its 256 connections.
//
// # Limits
//
// A leader cut off from the network sees every node silent and declares them all unreachable,
// as upstream's does. An agent that is hung but not dead stops accepting: its listening queue
// (somaxconn, 4096 by default) fills with probe connections in about ten minutes, after which
// its kernel drops SYNs; the grace period has declared it unreachable long before.
package reachability
