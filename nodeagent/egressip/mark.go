package egressip

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/nodeagent/leader"
)

// MarkAnnotation is upstream's packet mark of an EgressIP, which its cluster-manager allocates
// from MarkMin-MarkMax and its nodes use for EgressIPs on secondary networks. egressd steers
// by marks of its own and never reads it; the leader writes it as upstream so that a migrated
// object keeps its mark and a new one gets a valid, unique one, which upstream's
// cluster-manager requires of every EgressIP when it starts (a rollback).
const (
	MarkAnnotation = "k8s.ovn.org/egressip-mark"
	MarkMin        = 50000
	MarkMax        = 55000
)

// markChange is the mark an EgressIP must carry.
type markChange struct {
	name string
	mark int
}

// markChanges are the EgressIPs (by name) without a valid mark of their own: none, not a
// number in upstream's range, or one an EgressIP before them by name holds. Each gets the
// lowest mark no EgressIP holds. written are the marks this leader wrote that the cache may
// not show yet: they count as held, so a mark once written does not change.
func markChanges(eips []*ovnv1.EgressIP, written map[string]int) []markChange {
	eips = slices.Clone(eips)
	slices.SortFunc(eips, func(a, b *ovnv1.EgressIP) int { return strings.Compare(a.Name, b.Name) })
	held := map[int]bool{}
	var missing []string
	for _, e := range eips {
		v, ok := e.Annotations[MarkAnnotation]
		if !ok && written[e.Name] != 0 {
			v = strconv.Itoa(written[e.Name])
		}
		m, err := strconv.Atoi(v)
		if err != nil || m < MarkMin || m > MarkMax || held[m] {
			missing = append(missing, e.Name)
			continue
		}
		held[m] = true
	}
	var out []markChange
	next := MarkMin
	for _, name := range missing {
		for next <= MarkMax && held[next] {
			next++
		}
		if next > MarkMax {
			break // upstream's range is exhausted: upstream leaves these without a mark too
		}
		held[next] = true
		out = append(out, markChange{name: name, mark: next})
	}
	return out
}

// writeMarks annotates every EgressIP that lacks a valid mark, by a merge patch of that
// annotation alone (deploy/node-policy.yaml lets the controller change no other).
func (c *Controller) writeMarks(ctx context.Context, eips []*ovnv1.EgressIP) {
	written := map[string]int{} // those the cache does not show yet
	for _, e := range eips {
		if _, ok := e.Annotations[MarkAnnotation]; !ok && c.marks[e.Name] != 0 {
			written[e.Name] = c.marks[e.Name]
		}
	}
	c.marks = written
	changes := markChanges(eips, written)
	errs := make([]error, len(changes))
	leader.Writes(len(changes), func(i int) {
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"annotations": map[string]string{MarkAnnotation: strconv.Itoa(changes[i].mark)}}})
		if err == nil {
			_, err = c.Client.K8sOVNV1().EgressIPs().Patch(ctx, changes[i].name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "egressd-leader"})
		}
		errs[i] = err
	})
	for i, ch := range changes {
		if err := errs[i]; err != nil {
			c.Log.Error("write EgressIP mark", "object", "EgressIP "+ch.name, "err", fmt.Errorf("annotation %s=%d: %w", MarkAnnotation, ch.mark, err))
			continue
		}
		c.marks[ch.name] = ch.mark
		c.Log.Info("EgressIP mark", "object", "EgressIP "+ch.name, "mark", ch.mark)
	}
}
