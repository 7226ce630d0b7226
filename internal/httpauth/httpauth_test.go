package httpauth

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressd/egressd/internal/verdicts"
	"github.com/egressd/egressd/test/controlplane"
)

func TestMain(m *testing.M) { controlplane.Main(m) }

// Against a real API server: no token or a token it does not accept is 401; a ServiceAccount
// without the right to get the path is 403; one bound to a role allowing GET of /metrics reads
// /metrics, and still not /debug/pprof/.
func TestGuard(t *testing.T) {
	cp := controlplane.Shared(t)
	ns := cp.Namespace(t)
	client := cp.Client(t)
	ctx := context.Background()
	token := func(sa string) string {
		t.Helper()
		if _, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authnv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	reader, nobody := token("prometheus"), token("nobody")
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader-" + ns},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}
	if _, err := client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.RbacV1().ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
	})
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "prometheus", Namespace: ns}}}
	if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})

	g := &Guard{Client: client, Log: slog.New(slog.DiscardHandler)}
	srv := httptest.NewServer(g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "secret") })))
	defer srv.Close()
	get := func(path, token string) int {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		what, path, token string
		want              int
	}{
		{"no token", "/metrics", "", http.StatusUnauthorized},
		{"a forged token", "/metrics", "not-a-token", http.StatusUnauthorized},
		{"a ServiceAccount without the right", "/metrics", nobody, http.StatusForbidden},
		{"the reader", "/metrics", reader, http.StatusOK},
		{"the reader, again (cached)", "/metrics", reader, http.StatusOK},
		{"the reader, profiles", "/debug/pprof/profile", reader, http.StatusForbidden},
	} {
		// The RBAC cache of the API server may lag the binding just made.
		got := get(c.path, c.token)
		if got != c.want && c.want == http.StatusOK {
			g.verdicts = verdicts.Cache[int]{}
			got = get(c.path, c.token)
		}
		if got != c.want {
			t.Errorf("%s: GET %s = %d, want %d", c.what, c.path, got, c.want)
		}
	}
}
