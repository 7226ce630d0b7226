package kube

import (
	"os"
	"strings"
	"testing"
)

// TestReplaceUsers: the agent's user is a prefix of the controller's; each is replaced as a
// whole name, never inside the other, whichever the map names.
func TestReplaceUsers(t *testing.T) {
	doc := `expression: request.userInfo.username == 'system:serviceaccount:egressd:egressd'
---
expression: request.userInfo.username == 'system:serviceaccount:egressd:egressd-controller'
`
	for _, c := range []struct {
		users      map[string]string
		want       []string
		wantNamed  bool
		mustNotSee []string
	}{
		{map[string]string{DeployedAgent: "system:serviceaccount:t1:egressd"}, []string{"'system:serviceaccount:t1:egressd'", "'system:serviceaccount:egressd:egressd-controller'"}, true,
			[]string{"t1:egressd-controller"}},
		{map[string]string{DeployedController: "system:serviceaccount:t1:egressd-controller"}, []string{"'system:serviceaccount:egressd:egressd'", "'system:serviceaccount:t1:egressd-controller'"}, true, nil},
		{map[string]string{DeployedAgent: "system:serviceaccount:t1:egressd", DeployedController: "system:serviceaccount:t1:egressd-controller"},
			[]string{"'system:serviceaccount:t1:egressd'", "'system:serviceaccount:t1:egressd-controller'"}, true, []string{"serviceaccount:egressd:"}},
		{map[string]string{"system:serviceaccount:egressd:other": "x"}, nil, false, nil},
	} {
		got, named := replaceUsers(doc, c.users)
		if named != c.wantNamed {
			t.Errorf("%v: named %v, want %v", c.users, named, c.wantNamed)
		}
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%v: %q lacks %s", c.users, got, w)
			}
		}
		for _, w := range c.mustNotSee {
			if strings.Contains(got, w) {
				t.Errorf("%v: %q holds %s", c.users, got, w)
			}
		}
	}
}

// TestDeployedUsers: the policies of deploy/ name the users InstallPolicies replaces.
func TestDeployedUsers(t *testing.T) {
	for file, users := range map[string][]string{
		"node-policy.yaml":       {DeployedAgent, DeployedController},
		"nodereport-policy.yaml": {DeployedAgent},
		"router-pod-policy.yaml": {DeployedController},
	} {
		raw, err := os.ReadFile("../../deploy/" + file)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range users {
			if _, named := replaceUsers(string(raw), map[string]string{u: "x"}); !named {
				t.Errorf("deploy/%s does not name %s", file, u)
			}
		}
	}
}
