package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/egressd/egressd/test/poll"
)

// Only a deletion of the DaemonSet once seen, and not undone, is an uninstall.
func TestDaemonSetWatchObserve(t *testing.T) {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "egressd", Name: "egressd"}}
	deleting := ds.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
	for _, tc := range []struct {
		what   string
		events []any
		want   bool
	}{
		{"never seen (run without a DaemonSet)", nil, false},
		{"present (a restart, an upgrade)", []any{ds, ds}, false},
		{"deleted", []any{ds, nil}, true},
		{"being deleted (foreground)", []any{ds, deleting}, true},
		{"deleted, then created again (orphaning replacement)", []any{ds, nil, ds}, false},
	} {
		d := &daemonSetWatch{}
		for _, e := range tc.events {
			d.observe(e)
		}
		if got := d.deleted(); got != tc.want {
			t.Errorf("%s: deleted %v, want %v", tc.what, got, tc.want)
		}
	}
}

// The agent whose DaemonSet is deleted takes egressd-cni out of the chain when it stops.
func TestUnchainWhenTheDaemonSetIsDeleted(t *testing.T) {
	confDir := t.TempDir()
	conflist := filepath.Join(confDir, "10-ptp.conflist")
	if err := os.WriteFile(conflist, []byte(`{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"ptp"},{"type":"egressd-cni","socket":"/run/egressd/cni.sock"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	kube := kubefake.NewClientset(&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "egressd", Name: "egressd"}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := watchDaemonSet(ctx, kube, "egressd", "egressd", slog.New(slog.DiscardHandler))
	chained := func() bool {
		b, err := os.ReadFile(conflist)
		return err != nil || strings.Contains(string(b), "egressd-cni")
	}
	seen := func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.seen
	}
	poll.Eventually(t, "the DaemonSet seen", 10*time.Second, func() error {
		if !seen() {
			return errors.New("not yet")
		}
		return nil
	})
	d.unchainIfDeleted(confDir)
	if !chained() {
		t.Fatal("egressd-cni taken out of the chain while its DaemonSet exists (a restart, an upgrade)")
	}
	if err := kube.AppsV1().DaemonSets("egressd").Delete(ctx, "egressd", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, "the deletion seen", 10*time.Second, func() error {
		if !d.deleted() {
			return errors.New("not yet")
		}
		return nil
	})
	d.unchainIfDeleted(confDir)
	if chained() {
		b, _ := os.ReadFile(conflist)
		t.Errorf("after the DaemonSet's deletion: %s", b)
	}
}
