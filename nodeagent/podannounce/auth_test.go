package podannounce

import (
	"context"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// The token review: only a pod-bound token of the agents' ServiceAccount, for the announcement
// audience, names a node; a verdict is kept 30 s, then reviewed again.
func TestTokenReviewer(t *testing.T) {
	const agents = "system:serviceaccount:egressd:egressd"
	users := map[string]authnv1.TokenReviewStatus{
		"good":      {Authenticated: true, Audiences: []string{Audience}, User: authnv1.UserInfo{Username: agents, Extra: map[string]authnv1.ExtraValue{nodeNameExtra: {"node-1"}}}},
		"other-sa":  {Authenticated: true, Audiences: []string{Audience}, User: authnv1.UserInfo{Username: "system:serviceaccount:default:default", Extra: map[string]authnv1.ExtraValue{nodeNameExtra: {"node-1"}}}},
		"not-bound": {Authenticated: true, Audiences: []string{Audience}, User: authnv1.UserInfo{Username: agents}},
		"other-aud": {Authenticated: true, Audiences: []string{"https://kubernetes.default.svc"}, User: authnv1.UserInfo{Username: agents, Extra: map[string]authnv1.ExtraValue{nodeNameExtra: {"node-1"}}}},
		"rejected":  {Authenticated: false, Error: "invalid bearer token"},
	}
	reviews := 0
	client := fake.NewClientset()
	client.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		reviews++
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
		if len(tr.Spec.Audiences) != 1 || tr.Spec.Audiences[0] != Audience {
			t.Errorf("review asks for audiences %v, want %s", tr.Spec.Audiences, Audience)
		}
		tr.Status = users[tr.Spec.Token]
		return true, tr, nil
	})
	now := time.Unix(0, 0)
	r := &TokenReviewer{Client: client, Identity: agents, now: func() time.Time { return now }}
	ctx := context.Background()
	for token, want := range map[string]string{"good": "node-1", "other-sa": "not of the agents", "not-bound": "bound to no node",
		"other-aud": "not for audience", "rejected": "not accepted", "": "no token"} {
		node, err := r.Node(ctx, token)
		if got := node + errString(err); !strings.Contains(got, want) {
			t.Errorf("token %q: %q, want %q", token, got, want)
		}
		if token == "good" && err != nil {
			t.Errorf("token %q: %v", token, err)
		}
	}
	before := reviews
	if _, err := r.Node(ctx, "good"); err != nil || reviews != before {
		t.Errorf("within the TTL: %v, %d more reviews, want the kept verdict", err, reviews-before)
	}
	now = now.Add(31 * time.Second)
	if _, err := r.Node(ctx, "good"); err != nil || reviews != before+1 {
		t.Errorf("after the TTL: %v, %d more reviews, want one", err, reviews-before)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
