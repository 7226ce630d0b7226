package cloudprivateip

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	cloudv1 "github.com/egressd/egressd/api/cloudnetwork/v1"
	"github.com/egressd/egressd/api/generated/clientset/versioned/fake"
)

// A request the API refuses is reported with upstream's event for it (the next reconcile tries
// again); a deletion of what is already gone is no failure.
func TestRequesterFailures(t *testing.T) {
	ip, other, gone := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3")
	client := fake.NewSimpleClientset(
		&cloudv1.CloudPrivateIPConfig{ObjectMeta: metav1.ObjectMeta{Name: Name(ip)}, Spec: cloudv1.CloudPrivateIPConfigSpec{Node: "n1"}},
		&cloudv1.CloudPrivateIPConfig{ObjectMeta: metav1.ObjectMeta{Name: Name(other)}, Spec: cloudv1.CloudPrivateIPConfigSpec{Node: "n1"}})
	for _, verb := range []string{"create", "update", "delete"} {
		client.PrependReactor(verb, "cloudprivateipconfigs", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if verb == "delete" && a.(k8stesting.DeleteAction).GetName() == Name(gone) {
				return false, nil, nil // the tracker answers NotFound
			}
			return true, nil, errors.New("admission webhook denied the request")
		})
	}
	rec := record.NewFakeRecorder(10)
	r := &Requester{Client: client, Recorder: rec, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	r.Execute(context.Background(), []Op{
		{Kind: Create, EgressIP: "a", IP: netip.MustParseAddr("10.0.0.4"), Node: "n2"},
		{Kind: Move, EgressIP: "a", IP: ip, Node: "n2"},
		{Kind: Delete, EgressIP: "b", IP: other},
		{Kind: Delete, EgressIP: "b", IP: gone},
	})
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	want := []string{
		"Warning CloudAssignmentFailed egress IP: 10.0.0.4 for object EgressIP: a could not be created, err: admission webhook denied the request",
		"Warning CloudUpdateFailed egress IP: 10.0.0.1 for object EgressIP: a could not be updated, err: admission webhook denied the request",
		"Warning CloudDeletionFailed egress IP: 10.0.0.2 for object EgressIP: b could not be deleted, err: admission webhook denied the request",
	}
	if !slices.Equal(got, want) {
		t.Errorf("events\n got %q\nwant %q", got, want)
	}
}
