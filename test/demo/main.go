// Command demo runs egressd on its lab and shows, per example of deploy/examples, what was
// expected and what was observed (make demo). With --keep it stays up until interrupted or
// `make demo-down`, and prints how to look at it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressd/egressd/nodeagent"
	"github.com/egressd/egressd/test/agent"
	"github.com/egressd/egressd/test/controlplane"
	"github.com/egressd/egressd/test/kube"
)

// PidFile lets make demo-down stop a kept demo.
const PidFile = "/tmp/egressd-demo.pid"

func main() {
	keep := flag.Bool("keep", false, "leave the demo running until interrupted")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func repo() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func step(format string, a ...any) { fmt.Printf("==> "+format+"\n", a...) }

func run(ctx context.Context, keep bool) error {
	step("starting the control plane (etcd, kube-apiserver, kube-controller-manager; first run builds them: ~5-10 min)")
	cp, err := controlplane.Start(ctx, controlplane.Options{Log: os.Stdout})
	if err != nil {
		return err
	}
	defer cp.Stop()
	step("control plane ready at %s", cp.Server)

	client, err := kubeClient(cp)
	if err != nil {
		return err
	}
	ns := "egressd"
	if _, err := client.k.CoreV1().Namespaces().Create(ctx, nsObject(ns), metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := kube.GrantAgentRBAC(ctx, client.k, filepath.Join(repo(), "deploy", "rbac.yaml"), ns, "system:serviceaccount:egressd:egressd"); err != nil {
		return err
	}
	agentConfig, err := cp.KubeconfigFor("system:serviceaccount:egressd:egressd")
	if err != nil {
		return err
	}

	step("building and starting egressd on node-a and node-b (RBAC of deploy/rbac.yaml)")
	dir, err := os.MkdirTemp("", "egressd-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin, err := agent.Build(dir)
	if err != nil {
		return err
	}
	var agents []*agent.Process
	for _, node := range []string{"node-a", "node-b"} {
		p, err := agent.Launch(agent.Options{Binary: bin, LogDir: dir, Node: node, Kubeconfig: agentConfig, LeaderNamespace: ns})
		if err != nil {
			return err
		}
		defer p.Kill()
		agents = append(agents, p)
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		err = p.WaitReady(rctx)
		cancel()
		if err != nil {
			return fmt.Errorf("%w\n%s", err, p.Log())
		}
		time.Sleep(time.Second) // node-a takes the Lease before node-b starts campaigning
	}

	fmt.Println()
	report("agents ready", "/readyz 200 on both", func() string {
		s := ""
		for _, a := range agents {
			code, _, _ := a.Get("/readyz")
			s += fmt.Sprintf("%s=%d ", a.Node, code)
		}
		return s
	})
	report("leader election", "node-a holds Lease "+ns+"/"+nodeagent.LeaseName, func() string {
		l, err := client.k.CoordinationV1().Leases(ns).Get(ctx, nodeagent.LeaseName, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return fmt.Sprintf("no holder (%v)", err)
		}
		return "holder " + *l.Spec.HolderIdentity
	})
	report("metrics", "egressd_leader 1 on node-a, 0 on node-b", func() string {
		a, _ := agents[0].Metric("egressd_leader")
		b, _ := agents[1].Metric("egressd_leader")
		return fmt.Sprintf("node-a %s, node-b %s", a, b)
	})

	step("applying deploy/examples (one per API)")
	if _, err := client.k.CoreV1().Namespaces().Create(ctx, nsObject("demo"), metav1.CreateOptions{}); err != nil {
		return err
	}
	files, _ := filepath.Glob(filepath.Join(repo(), "deploy", "examples", "*.yaml"))
	for _, f := range files {
		doc, _ := os.ReadFile(f)
		err := client.dyn.Apply(ctx, "demo", string(doc))
		report(filepath.Base(f), "accepted by the API server (node programming: not yet, see README)", func() string {
			if err != nil {
				return "REJECTED: " + err.Error()
			}
			return "accepted"
		})
	}

	if !keep {
		step("tearing down")
		return nil
	}
	_ = os.WriteFile(PidFile, []byte(fmt.Sprint(os.Getpid())), 0o644)
	defer os.Remove(PidFile)
	fmt.Printf(`
The demo keeps running (Ctrl-C, or make demo-down from another shell, stops it).
  export KUBECONFIG=%s
  kubectl get egressfirewall,egressqos,eip,apbexternalroute,egressservice -A     (any kubectl)
  curl -s http://%s/metrics | grep ^egressd_       (node-a)
  curl -s http://%s/readyz
  agent logs: %s/node-a.log %s/node-b.log
`, cp.Kubeconfig, agents[0].MetricsAddr, agents[0].HealthAddr, dir, dir)
	<-ctx.Done()
	step("tearing down")
	return nil
}

func report(what, expected string, observe func() string) {
	fmt.Printf("  %-28s expected: %s\n  %-28s observed: %s\n", what, expected, "", observe())
}
