package classifier

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/egressd/egressd/bpf"
)

// content is what egressd wrote to the maps that are not kept per namespace, to diff against.
type content struct {
	pods     map[bpf.FromPodAddr]bpf.FromPodPodInfo
	cluster  map[bpf.FromPodClusterKey]uint8
	qos      map[bpf.FromPodLpmKey]bpf.FromPodQosValue
	ids      map[uint32]bpf.FromPodName
	qosRules map[bpf.FromPodStatKey]bpf.FromPodRuleText
	// steerExempt are the destinations pods' marks never apply to.
	steerExempt map[bpf.FromPodClusterKey]uint8
	frontends   map[bpf.FromPodFrontendKey]uint8
	// guarded are the interfaces whose packets must come from a pod behind them.
	guarded map[uint32]uint8
	// ports are the bridge ports a pod is known to be behind.
	ports map[uint32]uint8
}

func newContent() content {
	return content{
		pods: map[bpf.FromPodAddr]bpf.FromPodPodInfo{}, cluster: map[bpf.FromPodClusterKey]uint8{},
		qos: map[bpf.FromPodLpmKey]bpf.FromPodQosValue{}, ids: map[uint32]bpf.FromPodName{},
		qosRules: map[bpf.FromPodStatKey]bpf.FromPodRuleText{}, steerExempt: map[bpf.FromPodClusterKey]uint8{},
		frontends: map[bpf.FromPodFrontendKey]uint8{}, guarded: map[uint32]uint8{}, ports: map[uint32]uint8{},
	}
}

// syncMap makes m hold want, given that it holds have; have becomes want on success. Changes go
// in one batch call and removals in another; should a batch fail (a kernel without batch
// operations for the map type, or one entry the kernel refuses), the entries are written one by
// one so that every failure names its map and everything else still lands.
func syncMap[K comparable, V comparable](m *ebpf.Map, have, want map[K]V) error {
	var keys []K
	var values []V
	for k, v := range want {
		if old, ok := have[k]; !ok || old != v {
			keys, values = append(keys, k), append(values, v)
		}
	}
	var gone []K
	for k := range have {
		if _, ok := want[k]; !ok {
			gone = append(gone, k)
		}
	}
	var errs []error
	if len(keys) > 0 {
		if _, err := m.BatchUpdate(keys, values, nil); err == nil {
			for i, k := range keys {
				have[k] = values[i]
			}
		} else {
			for i, k := range keys {
				// Pointers let cilium/ebpf pass the structs' memory as is, without reflection.
				if err := m.Put(&keys[i], &values[i]); err != nil {
					errs = append(errs, fmt.Errorf("%s: update: %w", m.String(), err))
					continue
				}
				have[k] = values[i]
			}
		}
	}
	if len(gone) > 0 {
		if _, err := m.BatchDelete(gone, nil); err != nil {
			for _, k := range gone {
				if err := m.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
					errs = append(errs, fmt.Errorf("%s: delete: %w", m.String(), err))
					continue
				}
				delete(have, k)
			}
		} else {
			for _, k := range gone {
				delete(have, k)
			}
		}
	}
	return errors.Join(errs...)
}

// keepFailed carries over the written entries of ids whose policy failed (fail closed).
func keepFailed[K comparable, V any, ID ~uint32](written, want map[K]V, keep map[ID]bool, id func(K) uint32) {
	for k, v := range written {
		if keep[ID(id(k))] {
			want[k] = v
		}
	}
}
