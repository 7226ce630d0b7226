package cniinstall

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

// fuzzEntry is the entry as cmd/egressd configures it.
var fuzzEntry = map[string]any{"type": PluginType, "socket": "/run/egressd/cni.sock", "failOpen": false}

// decodeExact reads JSON keeping numbers as written, to compare values without float rounding.
func decodeExact(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// The node's CNI configuration is written by the primary CNI (or by whoever has the node), and
// the agent rewrites it. Whatever the file holds, chain never panics; a result parses as JSON,
// holds the file's other plugins and other keys unchanged and in order, and egressd-cni last,
// exactly once; chaining the result again changes nothing; and a configuration the runtime
// could read stays readable, with egressd-cni added to its chain.
func FuzzChain(f *testing.F) {
	for _, s := range []string{
		flannel,
		`{"cniVersion":"0.3.1","name":"k8s-pod-network","type":"calico","ipam":{"type":"calico-ipam"}}`,
		`{"cniVersion":"0.3.1","name":"cbr0","plugins":[{"type":"flannel"},{"type":"egressd-cni","socket":"/old"},{"type":"portmap"},{"type":"egressd-cni"}]}`,
		`{"cniVersion":"0.3.1","name":"cbr0","plugins":[{"type":"flannel"},{"type":"egressd-cni","socket":"/run/egressd/cni.sock","failOpen":false}]}`,
		`{"cniVersion":"1.0.0","name":"cilium","plugins":[{"type":"cilium-cni","enable-debug":false,"log-file":"/var/run/cilium/cilium-cni.log"}]}`,
		`{"cniVersion":"1.0.0","name":"kindnet","plugins":[{"type":"ptp","ipMasq":false,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.0.0/24"}]]},"mtu":1500},{"type":"portmap","capabilities":{"portMappings":true}}]}`,
		`{"plugins":`,
		`{"name":"x","plugins":null}`,
		`{"name":"x","plugins":[]}`,
		`{"name":"x"}`,
		`null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		conf, err := chain("10-fuzz.conflist", raw, fuzzEntry)
		if err != nil {
			if conf != nil {
				t.Fatalf("an error (%v) and a result %v", err, conf)
			}
			return
		}
		orig, derr := decodeExact(raw)
		om, isObject := orig.(map[string]any)
		if derr != nil || !isObject {
			t.Fatalf("chained %q, which is no JSON object (%v)", raw, derr)
		}
		// The file's plugins, and the keys besides them, as the result should hold them.
		var plugins []any
		rest := map[string]any{}
		if p, ok := om["plugins"]; ok {
			if plugins, ok = p.([]any); !ok {
				t.Fatalf("chained a configuration whose plugins are no list: %s", raw)
			}
			for k, v := range om {
				if k != "plugins" {
					rest[k] = v
				}
			}
		} else {
			rest["cniVersion"], rest["name"] = "", "" // as libcni.ConfListFromConf
			single := map[string]any{}
			for k, v := range om {
				if k == "cniVersion" || k == "name" {
					rest[k] = v
				} else {
					single[k] = v
				}
			}
			plugins = []any{single}
		}
		want, _ := decodeExact([]byte(`{"type":"egressd-cni","socket":"/run/egressd/cni.sock","failOpen":false}`))
		if conf == nil { // no change: chained already
			if n := len(plugins); n == 0 || !reflect.DeepEqual(plugins[n-1], want) || count(plugins) != 1 {
				t.Fatalf("left unchanged, but not chained: %s", raw)
			}
			return
		}
		out, err := json.MarshalIndent(conf, "", "  ")
		if err != nil {
			t.Fatalf("the result does not marshal: %v", err)
		}
		got, err := decodeExact(out)
		gm, _ := got.(map[string]any)
		if err != nil || gm == nil {
			t.Fatalf("the result is no JSON object (%v): %s", err, out)
		}
		gp, ok := gm["plugins"].([]any)
		if !ok || len(gp) == 0 || !reflect.DeepEqual(gp[len(gp)-1], want) || count(gp) != 1 {
			t.Fatalf("egressd-cni is not last exactly once: %s", out)
		}
		if kept, was := without(gp), without(plugins); !reflect.DeepEqual(kept, was) {
			t.Fatalf("the other plugins changed:\n got %v\nwant %v\nfrom %s", kept, was, raw)
		}
		for k, v := range rest {
			if !reflect.DeepEqual(gm[k], v) {
				t.Fatalf("key %q changed: %v, was %v", k, gm[k], v)
			}
		}
		for k := range gm {
			if _, ok := rest[k]; !ok && k != "plugins" {
				t.Fatalf("key %q added: %s", k, out)
			}
		}
		if again, err := chain("10-fuzz.conflist", out, fuzzEntry); err != nil || again != nil {
			t.Fatalf("chaining the result again: %v, %v; want no change", again, err)
		}
		// What the runtime could read, it still can, egressd-cni added.
		var types []string
		if _, isList := om["plugins"]; isList {
			l, err := libcni.ConfListFromBytes(raw)
			if err != nil {
				return
			}
			for _, p := range l.Plugins {
				if p.Network.Type != PluginType {
					types = append(types, p.Network.Type)
				}
			}
		} else {
			c, err := libcni.ConfFromBytes(raw)
			if err != nil {
				return
			}
			types = []string{c.Network.Type}
		}
		l, err := libcni.ConfListFromBytes(out)
		if err != nil {
			t.Fatalf("the runtime read the configuration, not the result: %v\n%s\n->\n%s", err, raw, out)
		}
		var gotTypes []string
		for _, p := range l.Plugins {
			gotTypes = append(gotTypes, p.Network.Type)
		}
		if !reflect.DeepEqual(gotTypes, append(types, PluginType)) {
			t.Fatalf("the runtime reads the chain %v, want %v and egressd-cni", gotTypes, types)
		}
	})
}
