package nodeagent

import (
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/nodeagent/egressfirewall"
	"github.com/egressd/egressd/nodeagent/egressip"
	"github.com/egressd/egressd/nodeagent/egressqos"
	"github.com/egressd/egressd/nodeagent/egressservice"
	"github.com/egressd/egressd/nodeagent/externalroute"
	"github.com/egressd/egressd/watchers"
)

// A feature is one API's step of every sync: it compiles the API's part of the node state into
// parts, which merge combines. Adding an API is its package with a pure compile, a feature
// here (one line in newFeatures) and what merge makes of its part.
type feature interface {
	// name labels the feature's compile time and errors in the metrics and the log.
	name() string
	// compile compiles the feature's part from in into p; when it fails, p keeps the feature's
	// previous part (fail closed: never an empty part because a lister failed).
	compile(in *cluster.Input, p *parts) error
}

// podReader is a feature that reads other nodes' pods where its node serves them: the scopes
// of those (the node's own pods are always read).
type podReader interface {
	servedPods(snap *watchers.Snapshot, node string) ([]watchers.PodScope, error)
}

// applyWatcher is a feature told of every object that failed to apply, when its failure starts
// or changes.
type applyWatcher interface {
	applyFailed(o dataplane.Origin, err error)
}

// newFeatures are the features every sync compiles, in order.
func newFeatures(cfg Config, deps Deps) []feature {
	return []feature{
		&firewalls{dns: deps.DNS},
		&qos{},
		&egressIPs{recorder: deps.Recorder},
		&services{node: cfg.Node, recorder: deps.Recorder},
		&routes{compiler: externalroute.Compiler{Legacy: cfg.LegacyGateways}, log: deps.Log},
	}
}

// keep makes part the feature's part, unless its compile failed.
func keep[P any](dst *P, part P, err error) error {
	if err == nil {
		*dst = part
	}
	return err
}

// firewalls is EgressFirewall; the resolver keeps the names of its dnsName rules resolved.
type firewalls struct {
	compiler egressfirewall.Compiler
	dns      Names
}

func (*firewalls) name() string { return "egressfirewall" }

func (f *firewalls) compile(in *cluster.Input, p *parts) error {
	part, err := f.compiler.Compile(in)
	err = keep(&p.firewall, part, err)
	f.dns.Want(p.firewall.DNSNames)
	return err
}

// qos is EgressQoS.
type qos struct{ compiled compiledMemo }

// qosReads are the kinds of objects EgressQoS's compile reads besides the local pods' labels:
// the Services' backends outside the cluster networks.
var qosReads = []any{&ovnv1.EgressQoS{}, &corev1.Service{}, &discoveryv1.EndpointSlice{}}

func (*qos) name() string { return "egressqos" }

func (f *qos) compile(in *cluster.Input, p *parts) error {
	return f.compiled.compileOfLocalPods(in, qosReads, func() error {
		part, err := egressqos.Compile(in)
		return keep(&p.qos, part, err)
	})
}

// egressIPs is EgressIP; the compile's events (UndefinedRequest) are recorded, when set.
type egressIPs struct {
	compiler egressip.Compiler
	recorder EventRecorder
	// recorded are the events of the last sync: a lasting condition is reported once, not at
	// every sync.
	recorded map[egressip.Event]bool
	served   watchers.Memo[[]watchers.PodScope]
	compiled compiledMemo
}

// egressIPReads are the kinds of objects EgressIP's compile reads.
var egressIPReads = []any{&ovnv1.EgressIP{}, &corev1.Node{}, &corev1.Namespace{}, &corev1.Pod{}}

func (*egressIPs) name() string { return "egressip" }

func (f *egressIPs) compile(in *cluster.Input, p *parts) error {
	return f.compiled.compile(in, egressIPReads, func() error {
		part, err := f.compiler.Compile(in)
		err = keep(&p.egressIP, part, err)
		f.record(p.egressIP.Events)
		return err
	})
}

// servedPodsReads are the kinds of objects the served scopes are named from: EgressIPs (their
// status too: the CRD has no status subresource, so an assignment moves the generation), the
// namespaces' and the node's labels.
var servedPodsReads = []any{&ovnv1.EgressIP{}, &corev1.Namespace{}, &corev1.Node{}}

func (f *egressIPs) servedPods(snap *watchers.Snapshot, node string) ([]watchers.PodScope, error) {
	return f.served.Get(snap.Generations, servedPodsReads, func() ([]watchers.PodScope, error) {
		return f.compiler.ServedPods(snap, node)
	})
}

// record records the events that were not recorded by the last sync.
func (f *egressIPs) record(events []egressip.Event) {
	if f.recorder == nil {
		return
	}
	seen := map[egressip.Event]bool{}
	for _, e := range events {
		seen[e] = true
		if f.recorded[e] {
			continue
		}
		ref := &corev1.ObjectReference{Kind: "EgressIP", APIVersion: ovnv1.SchemeGroupVersion.String(), Name: e.EgressIP}
		f.recorder.Event(ref, e.Type, e.Reason, e.Message)
	}
	f.recorded = seen
}

// services is EgressService; one this node fails to program gets a Warning event, when a
// recorder is set.
type services struct {
	node     string
	recorder EventRecorder
	compiled compiledMemo
}

func (*services) name() string { return "egressservice" }

// egressServiceReads are the kinds of objects EgressService's compile reads (its status.host
// counts as a change, watchers.statusOnly).
var egressServiceReads = []any{&ovnv1.EgressService{}, &corev1.Service{}, &discoveryv1.EndpointSlice{}, &corev1.Node{}}

func (f *services) compile(in *cluster.Input, p *parts) error {
	return f.compiled.compile(in, egressServiceReads, func() error {
		part, err := egressservice.Compile(in)
		return keep(&p.service, part, err)
	})
}

// applyFailed records a Warning on an EgressService this node failed to program (a network no
// routing table or VRF of this node is named by, an SNAT conflict): it has no status field of
// its own to say so.
func (f *services) applyFailed(o dataplane.Origin, err error) {
	if f.recorder == nil || o.Kind != cluster.KindEgressService {
		return
	}
	ref := &corev1.ObjectReference{Kind: "EgressService", APIVersion: ovnv1.SchemeGroupVersion.String(), Namespace: o.Namespace, Name: o.Name}
	f.recorder.Event(ref, corev1.EventTypeWarning, "EgressServiceNotApplied", fmt.Sprintf("%s: %v", f.node, err))
}

// routes is AdminPolicyBasedExternalRoute (and, with compiler.Legacy, the namespace and pod
// annotations of older OVN-Kubernetes); what it skips is logged at debug level.
type routes struct {
	compiler externalroute.Compiler
	log      *slog.Logger
}

func (*routes) name() string { return "externalroute" }

func (f *routes) compile(in *cluster.Input, p *parts) error {
	part, err := f.compiler.Compile(in)
	if err == nil {
		for _, w := range part.Warnings {
			f.log.Debug("external gateway", "warning", w)
		}
	}
	return keep(&p.routes, part, err)
}

func (f *routes) servedPods(snap *watchers.Snapshot, _ string) ([]watchers.PodScope, error) {
	return f.compiler.ServedPods(snap)
}
