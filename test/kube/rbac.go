package kube

import (
	"context"
	"fmt"
	"os"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
)

// GrantAgentRBAC gives user the permissions of the RBAC manifest at path (deploy/rbac.yaml for
// the agent, deploy/controller-rbac.yaml for the controller): its ClusterRole, and its Role, if
// any, created in ns (the leader-election namespace). Processes under test thereby run with
// exactly the permissions a cluster admin installs. It returns a cleanup.
func GrantAgentRBAC(ctx context.Context, client kubernetes.Interface, path, ns, user string) (func(), error) {
	doc, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	objs, err := Decode(string(doc))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: user, APIGroup: rbacv1.GroupName}}
	var bindings []string
	cleanup := func() {
		for _, b := range bindings {
			_ = client.RbacV1().ClusterRoleBindings().Delete(context.Background(), b, metav1.DeleteOptions{})
		}
	}
	for _, o := range objs {
		switch o.GetKind() {
		case "ClusterRole":
			var cr rbacv1.ClusterRole
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &cr); err != nil {
				return cleanup, err
			}
			if _, err := client.RbacV1().ClusterRoles().Create(ctx, &cr, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return cleanup, err
			}
			crb := &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: cr.Name + "-" + ns},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name},
				Subjects:   subject,
			}
			if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
				return cleanup, err
			}
			bindings = append(bindings, crb.Name)
		case "Role":
			var r rbacv1.Role
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r); err != nil {
				return cleanup, err
			}
			r.Namespace = ns
			if _, err := client.RbacV1().Roles(ns).Create(ctx, &r, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return cleanup, err
			}
			rb := &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: r.Name, Namespace: ns},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: r.Name},
				Subjects:   subject,
			}
			if _, err := client.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return cleanup, err
			}
		}
	}
	return cleanup, nil
}
