package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/egressd/egressd/test/agent"
)

// The kubelet stand-in runs the pods bound to lab nodes that the lab did not make itself
// (AddPod marks its own): the pods egressd creates, such as EgressRouter router pods. Per pod it
// does what kubelet and a container runtime do: a sandbox (a namespace) networked by the node's
// CNI chain (a failed ADD is recorded as a FailedCreatePodSandBox event and retried with a new
// sandbox, as kubelet does), the container's command when it is egressd's own (run from this
// tree's binary as nobody, without capabilities, as the pod's securityContext asks), the
// readiness probe when it is an exec of egressd (first until it passes, then at its period),
// and the status (Running, IPs, Ready as the probe says). A pod
// being deleted is torn down (CNI DEL, the namespace) and its object removed, as kubelet
// confirms a deletion.

// labPodAnnotation marks the pods AddPod makes: the stand-in leaves them alone.
const labPodAnnotation = "lab.egressd.io/add-pod"

// kubeletRetry is the pause between sandbox attempts of a pod whose CNI ADD failed.
const kubeletRetry = time.Second

// egressdImageBinary is where egressd's image holds the binary its pods run.
const egressdImageBinary = "/usr/local/bin/egressd"

type kubelet struct {
	lab *Lab
	// client is the stand-in's own, as kubelet has: not throttled by the tests' use of the lab's.
	client kubernetes.Interface
	mu     sync.Mutex
	pods   map[types.UID]*runningPod

	binOnce sync.Once
	bin     string
	binErr  error
}

// binary is egressd as the lab's pods run it: a copy in the lab's directory, which nobody (the
// pods' user) can reach, unlike the build cache under root's home.
func (k *kubelet) binary() (string, error) {
	k.binOnce.Do(func() {
		built, err := agent.Command("egressd")
		if err != nil {
			k.binErr = err
			return
		}
		dir := filepath.Join(k.lab.Dir, "bin")
		k.bin = filepath.Join(dir, "egressd")
		k.binErr = errors.Join(os.MkdirAll(dir, 0o755), os.Chmod(k.lab.Dir, 0o755), copyFile(built, k.bin, 0o755))
	})
	return k.bin, k.binErr
}

func copyFile(from, to string, mode os.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}

type runningPod struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// StartKubelet starts the kubelet stand-in of every lab node, until the lab closes.
func (l *Lab) StartKubelet(ctx context.Context) error {
	cfg := rest.CopyConfig(l.CP.Config)
	cfg.QPS, cfg.Burst = 50, 100 // kubelet's defaults
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	k := &kubelet{lab: l, client: client, pods: map[types.UID]*runningPod{}}
	f := informers.NewSharedInformerFactory(client, 0)
	inf := f.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { k.observe(ctx, o.(*corev1.Pod), false) },
		UpdateFunc: func(_, o any) { k.observe(ctx, o.(*corev1.Pod), false) },
		DeleteFunc: func(o any) {
			if p, ok := o.(*corev1.Pod); ok {
				k.observe(ctx, p, true)
			} else if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				if p, ok := d.Obj.(*corev1.Pod); ok {
					k.observe(ctx, p, true)
				}
			}
		},
	}); err != nil {
		cancel()
		return err
	}
	f.Start(ctx.Done())
	l.onClose(func() {
		cancel()
		f.Shutdown()
		k.mu.Lock()
		var running []chan struct{} // a copy: each pod's run deletes its entry as it ends
		for _, r := range k.pods {
			running = append(running, r.done)
		}
		k.mu.Unlock()
		for _, done := range running {
			<-done
		}
	})
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("kubelet stand-in: pod cache did not sync")
	}
	return nil
}

func (k *kubelet) node(name string) *Node {
	for _, n := range k.lab.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// observe starts a new pod of a lab node, and stops one that is deleted or being deleted.
func (k *kubelet) observe(ctx context.Context, p *corev1.Pod, deleted bool) {
	n := k.node(p.Spec.NodeName)
	if n == nil || p.Annotations[labPodAnnotation] != "" {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	r, running := k.pods[p.UID]
	switch {
	case (deleted || p.DeletionTimestamp != nil) && running:
		r.cancel()
	case !deleted && p.DeletionTimestamp == nil && !running && (p.Status.Phase == "" || p.Status.Phase == corev1.PodPending):
		pctx, cancel := context.WithCancel(ctx)
		r = &runningPod{cancel: cancel, done: make(chan struct{})}
		k.pods[p.UID] = r
		go func() {
			defer close(r.done)
			k.run(pctx, n, p.DeepCopy())
		}()
	}
}

// run keeps the pod running until ctx ends (the pod is deleted, or the lab closes), then tears
// it down and confirms the deletion.
func (k *kubelet) run(ctx context.Context, n *Node, obj *corev1.Pod) {
	var p *Pod
	var proc *exec.Cmd
	for attempt := 1; ctx.Err() == nil; attempt++ {
		var err error
		p, err = k.sandbox(ctx, n, obj, attempt)
		if err == nil {
			break
		}
		p = nil
		k.event(obj, "FailedCreatePodSandBox", err.Error())
		select {
		case <-ctx.Done():
		case <-time.After(kubeletRetry):
		}
	}
	if p != nil && ctx.Err() == nil {
		proc = k.start(p, obj)
		err := k.ready(ctx, p, obj)
		if err != nil {
			k.event(obj, "Unhealthy", err.Error())
			_ = k.setStatus(ctx, p, obj, false) // running, not ready
		}
		k.probeEvery(ctx, p, obj, err == nil)
	}
	<-ctx.Done()
	if proc != nil {
		_ = proc.Process.Kill()
		_ = proc.Wait()
	}
	if p != nil {
		_ = p.Delete(context.Background()) // CNI DEL, the object (grace 0), the namespace
	} else {
		k.confirmDeletion(obj)
	}
	k.mu.Lock()
	delete(k.pods, obj.UID)
	k.mu.Unlock()
}

// sandbox makes one attempt at the pod's sandbox: a namespace and the node's CNI chain.
func (k *kubelet) sandbox(ctx context.Context, n *Node, obj *corev1.Pod, attempt int) (*Pod, error) {
	n.lab.mu.Lock()
	n.podSeq++
	seq := n.podSeq
	n.lab.mu.Unlock()
	p := &Pod{Namespace: obj.Namespace, Name: obj.Name, Node: n, CNIPlugins: map[string]time.Duration{},
		Sandbox: fmt.Sprintf("lab-%s-%d-k%d-%d", n.lab.ID, n.Index, seq, attempt)}
	var err error
	if p.NS, err = n.lab.newNS(fmt.Sprintf("k%d-%d", n.Index, seq)); err != nil {
		return nil, err
	}
	if err := p.addNetwork(ctx, obj, PodOptions{}); err != nil {
		if p.cni != nil {
			_ = p.cni.DelNetworkList(context.Background(), p.conf, p.rt)
		}
		_ = p.NS.Delete()
		return nil, err
	}
	return p, nil
}

// start runs the pod's container when it is egressd's own command, in the pod's namespace, as
// the pod's securityContext asks (nobody, no capabilities, no new privileges).
func (k *kubelet) start(p *Pod, obj *corev1.Pod) *exec.Cmd {
	c := obj.Spec.Containers[0]
	if len(c.Command) == 0 || c.Command[0] != egressdImageBinary {
		return nil
	}
	bin, err := k.binary()
	if err != nil {
		k.event(obj, "Failed", "start container: "+err.Error())
		return nil
	}
	cmd := p.NS.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", "--bounding-set=-all",
		"--inh-caps=-all", "--no-new-privs", "--", bin}, append(c.Command[1:], c.Args...)...)...)
	if err := cmd.Start(); err != nil {
		k.event(obj, "Failed", "start container: "+err.Error())
		return nil
	}
	return cmd
}

// probe runs the pod's exec readiness probe once when it is egressd's (nil: no probe to run).
func (k *kubelet) probe(p *Pod, obj *corev1.Pod) error {
	probe := obj.Spec.Containers[0].ReadinessProbe
	if probe == nil || probe.Exec == nil || len(probe.Exec.Command) == 0 || probe.Exec.Command[0] != egressdImageBinary {
		return nil
	}
	bin, err := k.binary()
	if err != nil {
		return err
	}
	cmd := p.NS.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", "--bounding-set=-all",
		"--inh-caps=-all", "--no-new-privs", "--", bin}, probe.Exec.Command[1:]...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("readiness probe failed: %v: %s", err, out)
	}
	return nil
}

// ready runs the readiness probe until it passes (for up to 10 s), then writes the pod's
// status: Running, its IPs, Ready.
func (k *kubelet) ready(ctx context.Context, p *Pod, obj *corev1.Pod) error {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		err := k.probe(p, obj)
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
	}
	return k.setStatus(ctx, p, obj, true)
}

// setStatus writes the started pod's status, ready or not.
func (k *kubelet) setStatus(ctx context.Context, p *Pod, obj *corev1.Pod, ready bool) error {
	fresh, err := k.client.CoreV1().Pods(obj.Namespace).Get(ctx, obj.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	fresh.Status = p.status()
	if !ready {
		for i, c := range fresh.Status.Conditions {
			if c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
				fresh.Status.Conditions[i].Status = corev1.ConditionFalse
			}
		}
	}
	_, err = k.client.CoreV1().Pods(obj.Namespace).UpdateStatus(ctx, fresh, metav1.UpdateOptions{})
	return err
}

// probeEvery runs the readiness probe at its period until ctx ends, writing each change of
// the pod's readiness.
func (k *kubelet) probeEvery(ctx context.Context, p *Pod, obj *corev1.Pod, ready bool) {
	probe := obj.Spec.Containers[0].ReadinessProbe
	if probe == nil {
		return
	}
	period := time.Duration(max(probe.PeriodSeconds, 1)) * time.Second
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(period):
		}
		err := k.probe(p, obj)
		if (err == nil) == ready {
			continue
		}
		if err != nil {
			k.event(obj, "Unhealthy", err.Error())
		}
		if k.setStatus(ctx, p, obj, err == nil) == nil {
			ready = err == nil
		}
	}
}

// confirmDeletion removes the object of a pod that never got a sandbox.
func (k *kubelet) confirmDeletion(obj *corev1.Pod) {
	_ = k.client.CoreV1().Pods(obj.Namespace).Delete(context.Background(), obj.Name,
		metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: &obj.UID}})
}

func (k *kubelet) event(obj *corev1.Pod, reason, message string) {
	now := metav1.Now()
	_, _ = k.client.CoreV1().Events(obj.Namespace).Create(context.Background(), &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: obj.Name + ".", Namespace: obj.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: obj.Namespace, Name: obj.Name, UID: obj.UID},
		Reason:         reason, Message: message, Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "lab-kubelet", Host: obj.Spec.NodeName},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}, metav1.CreateOptions{})
}
