#!/usr/bin/env bash
# Regenerates everything derived from api/: deepcopy, apply configurations, clientset, listers,
# informers (k8s.io/code-generator) and the CRD manifests (controller-tools, then hack/crdpatch),
# and the BPF objects (bpf/generate.sh; with EGRESSD_VERIFY_BPF=1, as make verify-generate sets,
# it checks the committed objects instead of rebuilding them with whatever clang the host has).
set -euo pipefail
cd "$(dirname "$0")/.."

mod=github.com/egressd/egressd
out=api/generated
hdr=hack/boilerplate.go.txt
pkgs=(./api/k8sovn/v1 ./api/networkoperator/v1 ./api/cloudnetwork/v1 ./api/egressd/v1alpha1)
full=("${pkgs[@]/#./$mod}")
plural=EgressQoS:EgressQoSes

echo ">> deepcopy"
go tool deepcopy-gen --go-header-file "$hdr" --output-file zz_generated.deepcopy.go "${pkgs[@]}"

rm -rf "$out"
echo ">> apply configurations"
go tool applyconfiguration-gen --go-header-file "$hdr" \
  --output-dir "$out/applyconfiguration" --output-pkg "$mod/$out/applyconfiguration" "${full[@]}"
echo ">> clientset"
go tool client-gen --go-header-file "$hdr" --clientset-name versioned \
  --input-base "$mod/api" --input k8sovn/v1,networkoperator/v1,cloudnetwork/v1,egressd/v1alpha1 \
  --output-dir "$out/clientset" --output-pkg "$mod/$out/clientset" \
  --apply-configuration-package "$mod/$out/applyconfiguration" --plural-exceptions "$plural"
echo ">> listers"
go tool lister-gen --go-header-file "$hdr" --plural-exceptions "$plural" \
  --output-dir "$out/listers" --output-pkg "$mod/$out/listers" "${full[@]}"
echo ">> informers"
go tool informer-gen --go-header-file "$hdr" --plural-exceptions "$plural" \
  --versioned-clientset-package "$mod/$out/clientset/versioned" --listers-package "$mod/$out/listers" \
  --output-dir "$out/informers" --output-pkg "$mod/$out/informers" "${full[@]}"

echo ">> bpf2go"
if [ "${EGRESSD_VERIFY_BPF:-0}" = 1 ]; then
  bpf/generate.sh --verify
else
  bpf/generate.sh
fi

echo ">> CRDs"
rm -f deploy/crds/*.yaml
go tool controller-gen crd paths=./api/... output:crd:artifacts:config=deploy/crds
go run ./hack/crdpatch deploy/crds
