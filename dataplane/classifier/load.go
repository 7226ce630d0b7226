package classifier

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/egressd/egressd/bpf"
	"github.com/egressd/egressd/dataplane"
)

// Classifier owns the program and maps of bpf/src/frompod.c, pinned by name under the pin root
// so that a restarted agent finds the maps its links' program still uses.
type Classifier struct {
	// Program is the classifier, for ingress on the host side of pod-facing interfaces
	// (packets from the pods).
	Program *ebpf.Program
	// ToPod is for egress on the same interfaces (packets towards the pods): it records
	// what others initiate towards firewalled pods over ICMP echo and SCTP, which conntrack's
	// kfuncs cannot look up, so that Program lets the pods' replies through. It never drops
	// nor changes a packet.
	ToPod *ebpf.Program
	// FromPort is for ingress on each port of a bridge that faces pods alone (packets a pod
	// sends into the bridge): it drops a frame whose source is not the pod's behind the port.
	FromPort *ebpf.Program
	objs     bpf.FromPodObjects
	written  content
	// from are the lists some of written's maps were made from (listed).
	from lists
	// names are the namespaces of the namespace ids, as of the last Apply (read by metrics
	// scrapes, concurrently).
	names atomic.Pointer[map[nsID]string]
	info  ruleInfo
	// fwSets are the firewall entries of each namespace as written, so that a sync rewrites
	// only the namespaces whose rules changed.
	fwSets map[nsID]*fwSet
	// fwMemo is the firewall part computed from the last list of firewalls; textsOf is it
	// when the rule texts were all written from its sets.
	fwMemo  *firewallsMemo
	textsOf *firewallsMemo
	// gen is the value of egressd_fw_gen.
	gen uint32
	// logging is read by ServeACLLog, concurrently with Apply.
	logging atomic.Pointer[aclLogging]
	// logReader is ServeACLLog's reader; closed says Close ran, so that a reader ServeACLLog
	// opens after it (its goroutine started late) is closed at once, not leaked.
	readerMu  sync.Mutex
	logReader *ringbuf.Reader
	closed    bool
	// fwTexts are the rule texts of each namespace as written. They are written after the
	// entries that enforce, which need not wait for them.
	fwTexts map[nsID]*writtenTexts
	// markMask is the bits of skb->mark that pods' marks may occupy (the program's mark_mask).
	markMask uint32
	// aclLog is where ServeACLLog writes.
	aclLog *dataplane.ACLLogWriter
}

// Options of Load.
type Options struct {
	// ACLLogRate is how many verdicts per second each firewall rule may log (the acl-logging
	// meter, which OVN makes fair: a bucket per ACL); 0 logs nothing.
	ACLLogRate uint32
	// ACLLog is where ServeACLLog writes; nil is dataplane.StderrACLLog.
	ACLLog *dataplane.ACLLogWriter
	// MarkMask is the bits of skb->mark that pods' routing marks (dataplane.Pod.Mark) occupy;
	// the program leaves the other bits as it finds them (the CNI's, kube-proxy's). Apply
	// rejects a mark outside it. 0 means dataplane.DefaultMarkMask.
	MarkMask uint32
}

// DefaultACLLogRate is upstream's acl-logging-rate-limit default.
const DefaultACLLogRate = 20

// Load loads the classifier, reusing the maps pinned under pinRoot (their content keeps
// enforcing until the first Apply rewrites what changed).
func Load(pinRoot string, o Options) (*Classifier, error) {
	if err := os.MkdirAll(pinRoot, 0o755); err != nil {
		return nil, fmt.Errorf("pin root %s (is bpffs mounted?): %w", pinRoot, err)
	}
	if o.MarkMask == 0 {
		o.MarkMask = dataplane.DefaultMarkMask
	}
	if o.ACLLog == nil {
		o.ACLLog = dataplane.StderrACLLog
	}
	c := &Classifier{markMask: o.MarkMask, aclLog: o.ACLLog}
	spec, err := bpf.LoadFromPod()
	if err != nil {
		return nil, fmt.Errorf("load classifier: %w", err)
	}
	if err := spec.Variables["log_rate"].Set(o.ACLLogRate); err != nil {
		return nil, fmt.Errorf("load classifier: log_rate: %w", err)
	}
	if err := spec.Variables["mark_mask"].Set(o.MarkMask); err != nil {
		return nil, fmt.Errorf("load classifier: mark_mask: %w", err)
	}
	opts := &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: pinRoot}}
	err = spec.LoadAndAssign(&c.objs, opts)
	if errors.Is(err, ebpf.ErrMapIncompatible) {
		// An upgrade changed a map's layout: start these maps afresh.
		for _, name := range mapNames() {
			os.Remove(pinRoot + "/" + name)
		}
		err = spec.LoadAndAssign(&c.objs, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("load classifier: %w", err)
	}
	c.Program = c.objs.EgressdFrompod
	c.ToPod = c.objs.EgressdTopod
	c.FromPort = c.objs.EgressdFromport
	if err = c.read(); err != nil {
		c.objs.Close()
		return nil, err
	}
	return c, nil
}

// mapNames are the names of the program's maps, every one pinned by name under the pin root:
// read from the object, so that Cleanup and Inspect know every map the program has.
var mapNames = sync.OnceValue(func() []string {
	spec, err := bpf.LoadFromPod()
	if err != nil {
		panic(fmt.Sprintf("the embedded classifier object: %v", err)) // a build defect
	}
	var names []string
	for name, m := range spec.Maps {
		if m.Pinning == ebpf.PinByName {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
})

// read loads what the pinned maps hold (a previous agent's state); firewall entries are
// grouped into per-namespace sets of unknown fingerprint, so that the first sync rewrites
// what differs and removes what no namespace wants any more.
func (c *Classifier) read() error {
	c.written, c.from = newContent(), lists{}
	fw := map[bpf.FromPodLpmKey]bpf.FromPodFwEntry{}
	ports := map[bpf.FromPodPortKey]bpf.FromPodFwEntry{}
	texts := map[bpf.FromPodStatKey]bpf.FromPodRuleText{}
	w := &c.written
	errs := []error{
		readMap(c.objs.EgressdPods, w.pods), readMap(c.objs.EgressdCluster, w.cluster), readMap(c.objs.EgressdQos, w.qos),
		readMap(c.objs.EgressdIds, w.ids), readMap(c.objs.EgressdQosRules, w.qosRules),
		readMap(c.objs.EgressdSteerExempt, w.steerExempt), readMap(c.objs.EgressdFrontends, w.frontends),
		readMap(c.objs.EgressdGuarded, w.guarded), readMap(c.objs.EgressdPorts, w.ports),
		readMap(c.objs.EgressdFw, fw), readMap(c.objs.EgressdFwPorts, ports), readMap(c.objs.EgressdFwRules, texts),
	}
	var zero uint32
	errs = append(errs, c.objs.EgressdFwGen.Lookup(&zero, &c.gen))
	c.fwSets = map[nsID]*fwSet{}
	set := func(id nsID) *fwSet {
		if c.fwSets[id] == nil {
			c.fwSets[id] = newFwSet()
		}
		return c.fwSets[id]
	}
	for k, v := range fw {
		set(nsID(lpmID(k))).fw[k] = v
	}
	for k, v := range ports {
		set(nsID(k.Id &^ lpmIDv6)).ports[k] = v
	}
	c.fwTexts = map[nsID]*writtenTexts{}
	for k, v := range texts {
		id := nsID(k.NsId)
		if c.fwTexts[id] == nil {
			c.fwTexts[id] = &writtenTexts{texts: map[bpf.FromPodStatKey]bpf.FromPodRuleText{}}
		}
		c.fwTexts[id].texts[k] = v
	}
	return errors.Join(errs...)
}

func readMap[K comparable, V any](m *ebpf.Map, into map[K]V) error {
	var k K
	var v V
	it := m.Iterate()
	for it.Next(&k, &v) {
		into[k] = v
	}
	return it.Err()
}

// Close releases file descriptors; pinned maps and what uses them stay.
func (c *Classifier) Close() {
	c.readerMu.Lock()
	c.closed = true
	r := c.logReader
	c.readerMu.Unlock()
	if r != nil {
		r.Close()
	}
	c.objs.Close()
}

// Cleanup removes the classifier's pinned maps under pinRoot (egressctl cleanup).
func Cleanup(pinRoot string) error {
	var errs []error
	for _, name := range mapNames() {
		if err := os.Remove(pinRoot + "/" + name); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
