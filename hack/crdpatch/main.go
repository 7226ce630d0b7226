// Command crdpatch finishes the CRDs controller-gen writes, with what no kubebuilder marker can
// express:
//   - rules on metadata.name, added the same way upstream adds them: EgressFirewall and EgressQoS
//     must be named "default", a CloudPrivateIPConfig is named after its IP;
//   - "format: ip" (our marker for "an IPv4 or IPv6 address") becomes
//     anyOf: [{format: ipv4}, {format: ipv6}], which the API server checks at no CEL cost (a CEL
//     isIP() on unbounded lists exceeds the CRD cost budget).
package main

import (
	"fmt"
	"os"
	"path/filepath"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// nameRules maps a CRD name to the schema of metadata.name.
var nameRules = map[string]apiextv1.JSONSchemaProps{
	"egressfirewalls.k8s.ovn.org": {Type: "string", Pattern: "^default$"},
	"egressqoses.k8s.ovn.org":     {Type: "string", Pattern: "^default$"},
	"cloudprivateipconfigs.cloud.network.openshift.io": {
		Type: "string",
		AnyOf: []apiextv1.JSONSchemaProps{
			{Format: "ipv4"},
			{Pattern: `^[0-9a-f]{4}(\.[0-9a-f]{4}){7}$`},
		},
	},
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: crdpatch <dir of CRD yaml>")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "crdpatch:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return err
	}
	patched := 0
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var crd apiextv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		rule, named := nameRules[crd.Name]
		for i := range crd.Spec.Versions {
			root := crd.Spec.Versions[i].Schema.OpenAPIV3Schema
			expandIPFormat(root)
			if !named {
				continue
			}
			meta := root.Properties["metadata"]
			meta.Type = "object"
			meta.Properties = map[string]apiextv1.JSONSchemaProps{"name": rule}
			root.Properties["metadata"] = meta
		}
		out, err := marshalWithoutStatus(&crd)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if err := os.WriteFile(f, append([]byte("---\n"), out...), 0o644); err != nil {
			return err
		}
		if named {
			patched++
		}
	}
	if patched != len(nameRules) {
		return fmt.Errorf("patched %d CRDs, expected %d: a CRD was renamed", patched, len(nameRules))
	}
	return nil
}

// marshalWithoutStatus drops the empty status block a typed round trip adds, so the manifests
// stay as controller-gen writes them.
func marshalWithoutStatus(crd *apiextv1.CustomResourceDefinition) ([]byte, error) {
	js, err := yaml.Marshal(crd)
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	if err := yaml.Unmarshal(js, &obj); err != nil {
		return nil, err
	}
	delete(obj, "status")
	return yaml.Marshal(obj)
}

// expandIPFormat rewrites every "format: ip" in the schema tree.
func expandIPFormat(s *apiextv1.JSONSchemaProps) {
	if s == nil {
		return
	}
	if s.Format == "ip" {
		s.Format = ""
		s.AnyOf = []apiextv1.JSONSchemaProps{{Format: "ipv4"}, {Format: "ipv6"}}
	}
	for k, p := range s.Properties {
		expandIPFormat(&p)
		s.Properties[k] = p
	}
	if s.Items != nil {
		expandIPFormat(s.Items.Schema)
	}
}
