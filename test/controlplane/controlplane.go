// Package controlplane runs a real Kubernetes control plane for tests: etcd, kube-apiserver and
// kube-controller-manager built from Go modules (see Build), on loopback, with generated
// certificates, RBAC on, and egressd's CRDs installed.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/egressd/egressd/test/spawn"
)

// Options configure Start.
type Options struct {
	// Root holds one directory per running control plane; default $TMPDIR/egressd-controlplane.
	Root string
	// Detached control planes outlive the process that started them (make controlplane-up);
	// otherwise they are killed with it and swept by the next run.
	Detached bool
	// Log receives progress lines; default io.Discard.
	Log io.Writer
	// Scheduler, when set, is a kube-scheduler binary and the control plane serves real
	// kubelets (test/node): the ServiceAccount admission plugin mounts pods' tokens, the
	// DaemonSet controller runs, kube-scheduler places the DaemonSet's pods, and the Node
	// authorizer admits kubelets.
	Scheduler string
	// EtcdData, when set, is an etcd data directory an earlier control plane left (SaveEtcd):
	// a copy of it is this one's, so that its objects are there from the start.
	EtcdData string
}

// ControlPlane is one running control plane.
type ControlPlane struct {
	// Dir holds certificates, kubeconfigs, data and logs of this control plane.
	Dir string
	// Kubeconfig is the path of an admin (system:masters) kubeconfig.
	Kubeconfig string
	// Config is the admin client configuration.
	Config *rest.Config
	// Server is the API server URL (https://127.0.0.1:port).
	Server string

	ca    *authority
	procs []*exec.Cmd
}

const ownerFile, pidsFile = "owner.pid", "pids"

// DefaultRoot is where control planes keep their state unless Options.Root says otherwise.
func DefaultRoot() string { return filepath.Join(os.TempDir(), "egressd-controlplane") }

// Start builds (or reuses) the binaries, starts etcd, kube-apiserver and
// kube-controller-manager, waits until the API server is ready and installs deploy/crds.
func Start(ctx context.Context, opts Options) (*ControlPlane, error) {
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if opts.Root == "" {
		opts.Root = DefaultRoot()
	}
	if err := os.MkdirAll(opts.Root, 0o755); err != nil {
		return nil, err
	}
	Sweep(opts.Root, opts.Log)
	bins, err := Build(opts.Log)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(opts.Root, "run-")
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{Dir: dir}
	if err := cp.start(ctx, bins, opts); err != nil {
		cp.Stop()
		return nil, err
	}
	return cp, nil
}

func (cp *ControlPlane) start(ctx context.Context, bins Binaries, opts Options) error {
	owner := os.Getpid()
	if err := os.WriteFile(cp.path(ownerFile), []byte(strconv.Itoa(owner)), 0o644); err != nil {
		return err
	}
	ca, err := newAuthority()
	if err != nil {
		return err
	}
	cp.ca = ca
	ports, err := FreePorts(4)
	if err != nil {
		return err
	}
	etcdClient, etcdPeer, apiPort, kcmPort := ports[0], ports[1], ports[2], ports[3]
	cp.Server = fmt.Sprintf("https://127.0.0.1:%d", apiPort)

	// 10.96.0.1: the kubernetes Service, which pods of a real node reach (see test/node).
	servingCert, servingKey, err := ca.issue("kube-apiserver", nil, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.IPv4(10, 96, 0, 1)})
	if err != nil {
		return err
	}
	files := map[string][]byte{"ca.crt": ca.pem, "apiserver.crt": servingCert, "apiserver.key": servingKey}
	for name, data := range files {
		if err := os.WriteFile(cp.path(name), data, 0o600); err != nil {
			return err
		}
	}
	if err := writeServiceAccountKey(cp.path("sa.key")); err != nil {
		return err
	}
	if cp.Kubeconfig, err = cp.KubeconfigFor("admin", "system:masters"); err != nil {
		return err
	}
	if cp.Config, err = clientcmd.BuildConfigFromFlags("", cp.Kubeconfig); err != nil {
		return err
	}
	// Tests act as many clients at once (the kubelets' pod writes, a burst of objects): the
	// client's default limit (5 requests/s) would pace them, not the system under test.
	cp.Config.QPS, cp.Config.Burst = 200, 400
	// In group system:masters: without per-controller service account credentials, the
	// controllers act as the manager itself, whose bootstrap role lacks e.g. EndpointSlices.
	kcmConfig, err := cp.KubeconfigFor("system:kube-controller-manager", "system:masters")
	if err != nil {
		return err
	}

	if opts.EtcdData != "" {
		fmt.Fprintf(opts.Log, "copying etcd's data from %s\n", opts.EtcdData)
		if out, err := exec.Command("cp", "-a", opts.EtcdData, cp.path("etcd-data")).CombinedOutput(); err != nil {
			return fmt.Errorf("copy etcd data %s: %v: %s", opts.EtcdData, err, out)
		}
	}
	fmt.Fprintln(opts.Log, "starting etcd")
	if err := cp.run(opts, "etcd", bins.Etcd,
		"--data-dir", cp.path("etcd-data"),
		"--listen-client-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdClient),
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdPeer)); err != nil {
		return err
	}
	fmt.Fprintln(opts.Log, "starting kube-apiserver")
	apiArgs := []string{
		"--etcd-servers", fmt.Sprintf("http://127.0.0.1:%d", etcdClient),
		"--bind-address", "127.0.0.1",
		"--advertise-address", "127.0.0.1",
		// The kubernetes Service would point at loopback, which the reconciler refuses.
		"--endpoint-reconciler-type", "none",
		"--secure-port", strconv.Itoa(apiPort),
		"--cert-dir", cp.path("certs"),
		"--tls-cert-file", cp.path("apiserver.crt"),
		"--tls-private-key-file", cp.path("apiserver.key"),
		"--client-ca-file", cp.path("ca.crt"),
		"--service-account-key-file", cp.path("sa.key"),
		"--service-account-signing-key-file", cp.path("sa.key"),
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-cluster-ip-range", "10.96.0.0/16,fd00:10:96::/112",
		"--allow-privileged",
		"--v", "1",
	}
	if opts.Scheduler == "" {
		// Lab pods have no service account tokens mounted: there is no kubelet.
		apiArgs = append(apiArgs, "--authorization-mode", "RBAC", "--disable-admission-plugins", "ServiceAccount")
	} else {
		apiArgs = append(apiArgs, "--authorization-mode", "Node,RBAC", "--enable-admission-plugins", "NodeRestriction")
	}
	if err := cp.run(opts, "kube-apiserver", bins.APIServer, apiArgs...); err != nil {
		return err
	}
	if err := cp.waitReady(ctx, "kube-apiserver"); err != nil {
		return err
	}
	fmt.Fprintln(opts.Log, "starting kube-controller-manager")
	controllers := "endpointslice,endpointslicemirroring,namespace,garbagecollector,serviceaccount,serviceaccount-token"
	if opts.Scheduler != "" {
		// A real node runs deploy/ whole: the agents' DaemonSet and the controller's
		// Deployment (with its ReplicaSets and PodDisruptionBudget); its kubelet registers
		// the Node tainted not-ready, which node lifecycle takes off once it is Ready (the
		// DaemonSet tolerates everything, the Deployment does not). Its nodes all have a
		// kubelet's heartbeat.
		controllers += ",daemonset,root-ca-cert-publisher,deployment,replicaset,disruption,nodelifecycle"
	}
	// Only controllers the lab needs: nodes are played by the lab, so node lifecycle must not
	// taint them for lack of a kubelet heartbeat.
	if err := cp.run(opts, "kube-controller-manager", bins.ControllerManager,
		"--kubeconfig", kcmConfig,
		"--authentication-kubeconfig", kcmConfig,
		"--authorization-kubeconfig", kcmConfig,
		"--bind-address", "127.0.0.1",
		"--secure-port", strconv.Itoa(kcmPort),
		"--leader-elect=false",
		"--controllers", controllers,
		"--service-account-private-key-file", cp.path("sa.key"),
		"--root-ca-file", cp.path("ca.crt"),
		"--v", "1"); err != nil {
		return err
	}
	if opts.Scheduler != "" {
		if err := cp.startScheduler(opts); err != nil {
			return err
		}
	}
	fmt.Fprintln(opts.Log, "installing CRDs")
	if err := InstallCRDs(ctx, cp.Config, CRDDir()); err != nil {
		return err
	}
	if opts.Detached {
		// The control plane lives as long as its API server does.
		owner = cp.procs[1].Process.Pid
		if err := os.WriteFile(cp.path(ownerFile), []byte(strconv.Itoa(owner)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (cp *ControlPlane) startScheduler(opts Options) error {
	fmt.Fprintln(opts.Log, "starting kube-scheduler")
	cfg, err := cp.KubeconfigFor("system:kube-scheduler", "system:masters")
	if err != nil {
		return err
	}
	ports, err := FreePorts(1)
	if err != nil {
		return err
	}
	return cp.run(opts, "kube-scheduler", opts.Scheduler,
		"--kubeconfig", cfg,
		"--authentication-kubeconfig", cfg,
		"--authorization-kubeconfig", cfg,
		"--bind-address", "127.0.0.1",
		"--secure-port", strconv.Itoa(ports[0]),
		"--leader-elect=false",
		"--v", "1")
}

func (cp *ControlPlane) path(name string) string { return filepath.Join(cp.Dir, name) }

// run starts a component with its output in <dir>/<name>.log and records its pid for Sweep.
func (cp *ControlPlane) run(opts Options, name, bin string, args ...string) error {
	logf, err := os.Create(cp.path(name + ".log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	start := spawn.Start // killed with this process...
	if opts.Detached {
		start = (*exec.Cmd).Start // ...unless it must outlive it
	}
	if err := start(cmd); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	cp.procs = append(cp.procs, cmd)
	f, err := os.OpenFile(cp.path(pidsFile), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = fmt.Fprintf(f, "%d\n", cmd.Process.Pid)
	return err
}

func (cp *ControlPlane) waitReady(ctx context.Context, name string) error {
	client, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		return err
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		if p := cp.procs[len(cp.procs)-1]; p.ProcessState != nil || !alive(p.Process.Pid) {
			return false, fmt.Errorf("%s exited", name)
		}
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			last = fmt.Errorf("%w: %s", err, body)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("%s not ready (last: %v): %w\n%s", name, last, err, cp.LogTail(name, 30))
	}
	return nil
}

// LogTail returns the last n lines of a component's log, for failure messages.
func (cp *ControlPlane) LogTail(name string, n int) string {
	b, _ := os.ReadFile(cp.path(name + ".log"))
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// KubeconfigFor writes a kubeconfig authenticating as user in groups (client certificate) and
// returns its path; tests use it to check RBAC.
func (cp *ControlPlane) KubeconfigFor(user string, groups ...string) (string, error) {
	return cp.KubeconfigAt(cp.Server, user, groups...)
}

// KubeconfigAt is KubeconfigFor with another server URL (e.g. a forwarder into a lab node).
func (cp *ControlPlane) KubeconfigAt(server, user string, groups ...string) (string, error) {
	cert, key, err := cp.ca.issue(user, groups, nil)
	if err != nil {
		return "", err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["egressd-test"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: cp.ca.pem}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	cfg.Contexts["egressd-test"] = &clientcmdapi.Context{Cluster: "egressd-test", AuthInfo: user}
	cfg.CurrentContext = "egressd-test"
	name := user
	if server != cp.Server {
		name += "@" + server
	}
	path := cp.path(strings.NewReplacer(":", "_", "/", "_").Replace(name) + ".kubeconfig")
	// Written aside and renamed: agents started at once ask for the same file, and one must
	// never read another's half-written copy.
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return "", err
	}
	tmp.Close()
	if err := clientcmd.WriteToFile(*cfg, tmp.Name()); err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	return path, os.Rename(tmp.Name(), path)
}

// CRDDir is deploy/crds of this repository.
func CRDDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "deploy", "crds")
}

// InstallCRDs creates (or updates) every CRD in dir and waits until all are established.
func InstallCRDs(ctx context.Context, cfg *rest.Config, dir string) error {
	client, err := apiextclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no CRDs in %s: %v", dir, err)
	}
	var names []string
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var crd apiextv1.CustomResourceDefinition
		if err := yaml.Unmarshal(raw, &crd); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		_, err = client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, &crd, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			cur, gerr := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
			if gerr != nil {
				return gerr
			}
			crd.ResourceVersion = cur.ResourceVersion
			_, err = client.ApiextensionsV1().CustomResourceDefinitions().Update(ctx, &crd, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("install CRD %s: %w", crd.Name, err)
		}
		names = append(names, crd.Name)
	}
	for _, name := range names {
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			crd, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, c := range crd.Status.Conditions {
				if c.Type == apiextv1.Established && c.Status == apiextv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s not established: %w", name, errors.Join(err))
		}
	}
	return nil
}
