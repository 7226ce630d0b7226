package podannounce

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/egressd/egressd/internal/verdicts"
)

// Audience is the audience of the tokens that authenticate announcements: the DaemonSet
// projects one for it, which the API server refuses as a credential for anything else, and an
// API token (the pod's default audience) is refused here.
const Audience = "egressd.io/pod-announce"

// DefaultTokenFile is where the DaemonSet projects the agent's token for Audience.
const DefaultTokenFile = "/var/run/secrets/egressd/pod-announce/token"

// nodeNameExtra is the user extra the API server sets from a pod-bound token's node.
const nodeNameExtra = "authentication.kubernetes.io/node-name"

// Authenticator names the node an announcement comes from, from its sender's token.
type Authenticator interface {
	Node(ctx context.Context, token string) (string, error)
}

// TokenReviewer authenticates announcements by the sender's pod-bound ServiceAccount token,
// reviewed by the API server (TokenReview, for Audience): the token must be of the agents'
// ServiceAccount, and its node-name claim (the node its pod is bound to) names the sender's node.
// Verdicts are kept 30 s, so that a burst of new pods costs one review per sender.
type TokenReviewer struct {
	Client kubernetes.Interface
	// Identity is the agents' ServiceAccount user, system:serviceaccount:<namespace>:<name>.
	Identity string
	// now is the clock (tests).
	now func() time.Time

	verdicts verdicts.Cache[verdict]
}

type verdict struct {
	node string
	err  error
}

// reviewTimeout bounds one review.
const reviewTimeout = 5 * time.Second

// errReview is a review the API server could not make: not cached.
var errReview = errors.New("the API server could not review the token")

// Node returns the node the token's pod is bound to, or why the token is refused.
func (a *TokenReviewer) Node(ctx context.Context, token string) (string, error) {
	if token == "" {
		return "", errors.New("no token (a pod-bound token of the agents' ServiceAccount for audience " + Audience + ")")
	}
	key := verdicts.Key(token)
	now := time.Now()
	if a.now != nil {
		now = a.now()
	}
	if v, ok := a.verdicts.Get(key, now); ok {
		return v.node, v.err
	}
	node, err := a.review(ctx, token)
	if errors.Is(err, errReview) {
		return "", err
	}
	a.verdicts.Put(key, verdict{node, err}, now)
	return node, err
}

func (a *TokenReviewer) review(ctx context.Context, token string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	tr, err := a.Client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{Audience}}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("%w: %v", errReview, err)
	}
	switch u := tr.Status.User; {
	case !tr.Status.Authenticated:
		return "", fmt.Errorf("token not accepted for audience %s: %s", Audience, tr.Status.Error)
	case !slices.Contains(tr.Status.Audiences, Audience):
		return "", fmt.Errorf("token not for audience %s", Audience)
	case u.Username != a.Identity:
		return "", fmt.Errorf("token of %s, not of the agents (%s)", u.Username, a.Identity)
	case len(u.Extra[nodeNameExtra]) != 1 || u.Extra[nodeNameExtra][0] == "":
		return "", errors.New("token bound to no node (not a pod-bound token)")
	default:
		return u.Extra[nodeNameExtra][0], nil
	}
}

// tokenFile sends the token in a file (the kubelet rotates a projected token in place) with
// every call.
type tokenFile string

func (f tokenFile) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	b, err := os.ReadFile(string(f))
	if err != nil {
		return nil, fmt.Errorf("the token that authenticates pod announcements: %w", err)
	}
	return map[string]string{"authorization": "Bearer " + strings.TrimSpace(string(b))}, nil
}

// RequireTransportSecurity is false: the agents' port is plaintext. A token seen on the wire
// lets its holder announce that node's pods alone, to the receivers' checks, until it expires.
func (tokenFile) RequireTransportSecurity() bool { return false }
