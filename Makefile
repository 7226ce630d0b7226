# egressd: see README.md. Every target works on a fresh Debian 12 machine as root.
SHELL    := /bin/bash
GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X github.com/egressd/egressd/internal/version.Version=$(VERSION)
IMAGE    ?= ghcr.io/egressd/egressd:$(VERSION)
CLANG    ?= clang
FUZZTIME ?= 5m
export EGRESSD_REQUIRE_PRIVILEGED ?= 0

.PHONY: all build generate docs verify-generate deps controlplane-bin node-bin image-archive test test-compat test-unit fuzz bench-memory bench-bfd bench-firewall bench-cni bench-egressip bench-egressservice bench-externalroute bench-scale bench-status bench-compat demo demo-down \
        controlplane-up controlplane-down image clean

all: build

build: ## egressd and egressctl into bin/
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/ ./cmd/egressd ./cmd/egressctl

generate: ## deepcopy, clientset, listers, informers, CRDs from api/; bpf2go objects from bpf/src (CLANG=clang-N to pick a compiler)
	CLANG=$(CLANG) hack/update-codegen.sh

docs: ## docs/reference (flags and metrics of the agent and egressd controller, egressctl's flags) from the code that declares them
	$(GO) test ./cmd/egressd ./cmd/egressctl -run '^TestReferenceDocs' -count=1 -update

verify-generate: ## fails if the committed generated code or docs/reference is stale (BPF objects: byte for byte only with the recorded clang major, see bpf/doc.go; BPF_VERIFY_STRICT=1 fails otherwise)
	$(GO) test ./cmd/egressd ./cmd/egressctl -run '^TestReferenceDocs' -count=1
	CLANG=$(CLANG) EGRESSD_VERIFY_BPF=1 hack/update-codegen.sh
	@git add -N api deploy/crds bpf && git diff --exit-code --stat -- api deploy/crds bpf \
	  || { echo "generated code is stale: run make generate and commit"; exit 1; }

deps: ## packages of MACHINE.md and bpffs (root only; no-op when present)
	@hack/install-deps.sh

controlplane-bin: ## build (or find cached) etcd, kube-apiserver, kube-controller-manager
	$(GO) run ./test/controlplane/cmd/controlplane build

node-bin: ## build (or find cached) kubelet, kube-scheduler, kube-proxy, containerd for the lab's real node (test/node) and lab.Options.KubeProxy
	$(GO) run ./test/node/cmd/realnode build

test: deps controlplane-bin node-bin ## every tier: unit, bpf, dataplane, control plane, end to end; race detector on, agents included
	set -o pipefail; EGRESSD_RACE=1 GORACE="halt_on_error=1 atexit_sleep_ms=0" $(GO) test -race -json -count=1 -timeout 60m ./... 2>&1 | $(GO) run ./hack/testsummary

test-compat: deps controlplane-bin node-bin ## the demo's scenarios per API on each CNI (reference plugins, flannel, Cilium in three modes) and kube-proxy mode; COMPAT=flannel/nftables,... picks, WRITE=1 updates docs/compat.md
	$(GO) run ./hack/compat $(if $(COMPAT),-only $(COMPAT)) $(if $(WRITE),-write)

bench-compat: deps controlplane-bin ## per CNI (reference routed and bridged, flannel, Cilium): EgressIP failover (20 trials) and the UDP throughput ratio with an 8000-rule EgressFirewall, against the same CNI without egressd
	set -o pipefail; for cni in routed bridged flannel cilium; do echo "== CNI $$cni"; EGRESSD_BENCH_CNI=$$cni $(GO) test ./test/e2e -run '^$$' -bench 'PrivilegedEgressIPFailover$$|PrivilegedThroughput/cidr' -benchtime 1x -timeout 30m -v 2>&1 | grep -E '^(Benchmark|ok|FAIL|--- FAIL)|CNI: |over [0-9]+ trials|paired ratios' || exit 1; done

test-unit: ## tests that need neither root nor a control plane
	$(GO) test -count=1 ./api/... ./cmd/... ./dataplane/... ./internal/... ./nodeagent/... ./watchers/...

fuzz: ## fuzz what reaches the agent from outside its trust, each target FUZZTIME (5m) in turn (their seeds run in every go test)
	$(GO) test ./nodeagent/podannounce -run '^$$' -fuzz '^FuzzAnnouncement$$' -fuzztime $(FUZZTIME) -timeout 0
	$(GO) test ./nodeagent/cniserver -run '^$$' -fuzz '^FuzzRequest$$' -fuzztime $(FUZZTIME) -timeout 0
	$(GO) test ./cmd/egressd-cni -run '^$$' -fuzz '^FuzzStdin$$' -fuzztime $(FUZZTIME) -timeout 0
	$(GO) test ./internal/cniinstall -run '^$$' -fuzz '^FuzzChain$$' -fuzztime $(FUZZTIME) -timeout 0
	$(GO) test ./nodeagent/egressfirewall -run '^$$' -fuzz '^FuzzCompileRule$$' -fuzztime $(FUZZTIME) -timeout 0
	$(GO) test ./dataplane/dnsanswers -run '^$$' -fuzz '^FuzzMessages$$' -fuzztime $(FUZZTIME) -timeout 0

bench-memory: controlplane-bin ## agent RSS with 10,000 pods and 1,000 namespaces in the API server
	$(GO) test ./test/e2e -run '^$$' -bench PrivilegedAgentMemory -benchtime 1x

bench-bfd: deps ## BFD: CPU of 200 sessions at 100ms x 3, detection time over 20 failures (root, FRR)
	$(GO) test ./dataplane/bfd -run '^$$' -bench Privileged -benchtime 1x

bench-cni: deps controlplane-bin ## time egressd-cni adds to a pod's CNI ADD: p50/p99 over 200 pods added 16, 4 and 1 at a time, empty node (and a no-op plugin in its place) and 1000 firewalls; attaching the classifier to 16 new interfaces (tc filters, tcx links)
	$(GO) test ./dataplane/tc -run '^$$' -bench PrivilegedAttach -benchtime 4x
	$(GO) test ./test/e2e -run '^$$' -bench 'PrivilegedCNIAdd' -benchtime 1x -timeout 20m -v

bench-egressip: deps controlplane-bin ## EgressIP failover (link down, 20 trials; the leader case), programming of a new pod; 100 objects x 10,000 pods: programming and throughput ratio
	$(GO) test ./test/e2e -run '^$$' -bench 'PrivilegedEgressIP' -benchtime 1x -timeout 30m -v

bench-egressservice: deps controlplane-bin ## EgressService host failover (link down, 20 trials); 500 EgressServices x 10 endpoints: create -> hosts elected, SNAT programmed
	$(GO) test ./test/e2e -run '^$$' -bench 'PrivilegedEgressService' -benchtime 1x -timeout 30m -v

bench-externalroute: deps controlplane-bin ## external gateways: failover (BFD 300ms and 100ms x 3, 20 trials), programming (100 namespaces x 10 pods, 8 gateways)
	$(GO) test ./test/e2e -run '^$$' -bench 'PrivilegedExternalRoute' -benchtime 1x -timeout 30m -v

bench-firewall: deps controlplane-bin ## classifier ns/packet; 8000-rule apply time; change latency with 1000 namespaces; UDP throughput ratio
	$(GO) test ./dataplane/classifier -run '^$$' -bench PrivilegedClassifier -benchtime 2000000x
	$(GO) test ./dataplane/classifier -run '^$$' -bench PrivilegedApply -benchtime 20x
	$(GO) test ./test/e2e -run '^$$' -bench 'Privileged(FirewallApply|Throughput)' -benchtime 1x -timeout 20m

bench-scale: deps controlplane-bin ## issue #35's targets on kwok's 5,000 nodes and 150,000 pods, 10,000 EgressFirewalls, real agents and controller (SCALE=small: 50 nodes, 1,500 pods, a quick run)
	$(GO) run ./test/scale -size $(or $(SCALE),full) $(if $(PROFILES),-profiles $(PROFILES))

bench-status: controlplane-bin ## what per-node status entries cost the API server: one node's write into an EgressFirewall holding 100, 500, 1,000 nodes' entries (server-side apply per node, as upstream; a JSON patch)
	$(GO) test ./test/statuscost -run '^$$' -bench NodeEntries -benchtime 20x -timeout 30m -v

demo: deps ## egressd on its lab: expected vs observed per example (KEEP=1 leaves it up)
	$(GO) run ./test/demo $(if $(KEEP),--keep)

demo-down: ## stop a demo left running with KEEP=1
	@if [ -f /tmp/egressd-demo.pid ]; then kill $$(cat /tmp/egressd-demo.pid) && echo "demo stopping"; \
	 else echo "no demo running"; fi

controlplane-up: ## start a detached control plane; last line is KUBECONFIG=<path>
	@$(GO) run ./test/controlplane/cmd/controlplane up

controlplane-down:
	@$(GO) run ./test/controlplane/cmd/controlplane down

image: ## container image (needs a Docker engine; none runs on the dev machines)
	docker build --build-arg VERSION=$(VERSION) -t $(IMAGE) .

image-archive: ## the same image as an OCI archive, built in Go without Docker: bin/egressd-image.oci.tar
	$(GO) run ./test/node/cmd/realnode image-archive -o bin/egressd-image.oci.tar -ref $(IMAGE) -version $(VERSION)

clean:
	rm -rf bin
