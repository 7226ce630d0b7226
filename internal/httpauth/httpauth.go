// Package httpauth guards an HTTP endpoint (metrics, profiles) as the kubelet and
// controller-runtime guard theirs: the caller's bearer token is checked by a TokenReview, and
// its right to GET the path by a SubjectAccessReview (a non-resource URL, e.g. /metrics), both
// against the API server. Pods on the node reach the agent's host-network ports; without a
// token that may read them, they get 401 or 403, not namespaces, object names and errors.
package httpauth

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/egressd/egressd/internal/verdicts"
)

// Guard checks each request's token and right before passing it on.
type Guard struct {
	Client kubernetes.Interface
	Log    *slog.Logger
	// now is the clock (tests).
	now func() time.Time

	// verdicts are the outcomes (http.StatusOK, StatusUnauthorized or StatusForbidden) by
	// token and path, kept 30 s: a scrape every 15 s costs the API server two reviews a
	// minute, not eight.
	verdicts verdicts.Cache[int]
}

// reviewTimeout bounds the two reviews of one request.
const reviewTimeout = 5 * time.Second

// Wrap returns h behind the guard.
func (g *Guard) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || token == "" {
			http.Error(w, "a bearer token is required (a ServiceAccount allowed to get "+r.URL.Path+")", http.StatusUnauthorized)
			return
		}
		code := g.verdict(r.Context(), token, r.URL.Path)
		switch code {
		case http.StatusOK:
			h.ServeHTTP(w, r)
		case http.StatusUnauthorized:
			http.Error(w, "the token was not accepted by the API server", code)
		case http.StatusForbidden:
			http.Error(w, "the token's user may not get "+r.URL.Path, code)
		default:
			http.Error(w, "the API server could not review the token", code)
		}
	})
}

func (g *Guard) clock() time.Time {
	if g.now != nil {
		return g.now()
	}
	return time.Now()
}

// verdict is the cached or fresh outcome for token and path; a failed review is not cached.
func (g *Guard) verdict(ctx context.Context, token, path string) int {
	key := verdicts.Key(token, path)
	now := g.clock()
	if code, ok := g.verdicts.Get(key, now); ok {
		return code
	}
	code, err := g.review(ctx, token, path)
	if err != nil {
		g.Log.Error("review of a request's token", "path", path, "err", err)
		return http.StatusServiceUnavailable
	}
	g.verdicts.Put(key, code, now)
	return code
}

// review asks the API server who the token is and whether that user may get path.
func (g *Guard) review(ctx context.Context, token, path string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	tr, err := g.Client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return 0, fmt.Errorf("TokenReview: %w", err)
	}
	if !tr.Status.Authenticated {
		return http.StatusUnauthorized, nil
	}
	u := tr.Status.User
	extra := map[string]authzv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	sar, err := g.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: path, Verb: "get"},
	}}, metav1.CreateOptions{})
	if err != nil {
		return 0, fmt.Errorf("SubjectAccessReview: %w", err)
	}
	if !sar.Status.Allowed {
		return http.StatusForbidden, nil
	}
	return http.StatusOK, nil
}
