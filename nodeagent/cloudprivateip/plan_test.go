package cloudprivateip

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cloudv1 "github.com/egressd/egressd/api/cloudnetwork/v1"
	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
)

// cpic is a request for ip by owner on spec node; answer is the CNCC's: "" none yet,
// "pending", "ok@<node>", "error@<node>".
func cpic(ip, owner, node, answer string) *cloudv1.CloudPrivateIPConfig {
	c := &cloudv1.CloudPrivateIPConfig{ObjectMeta: metav1.ObjectMeta{Name: Name(netip.MustParseAddr(ip))}, Spec: cloudv1.CloudPrivateIPConfigSpec{Node: node}}
	if owner != "" {
		c.Annotations = map[string]string{OwnerAnnotation: owner}
	}
	kind, at, _ := strings.Cut(answer, "@")
	cond := metav1.Condition{Type: string(cloudv1.Assigned)}
	switch kind {
	case "":
		return c
	case "pending":
		cond.Status, cond.Reason, cond.Message = metav1.ConditionUnknown, "CloudResponsePending", "Adding IP address"
	case "ok":
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, "CloudResponseSuccess", "IP address successfully added"
	case "error":
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "CloudResponseError", "Error processing cloud assignment request, err: quota"
	}
	c.Status.Node = at
	c.Status.Conditions = []metav1.Condition{cond}
	return c
}

func deleting(c *cloudv1.CloudPrivateIPConfig) *cloudv1.CloudPrivateIPConfig {
	now := metav1.Now()
	c.DeletionTimestamp = &now
	return c
}

func items(s ...string) []ovnv1.EgressIPStatusItem {
	out := []ovnv1.EgressIPStatusItem{}
	for _, x := range s {
		ip, node, _ := strings.Cut(x, "@")
		out = append(out, ovnv1.EgressIPStatusItem{EgressIP: ip, Node: node})
	}
	return out
}

func eip(name string, status ...string) *ovnv1.EgressIP {
	e := &ovnv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: name}}
	e.Status.Items = items(status...)
	return e
}

func TestHeld(t *testing.T) {
	eips := []*ovnv1.EgressIP{
		// 10.0.0.1 confirmed; 10.0.0.2's request was deleted meanwhile; 10.0.0.3 is being moved
		// to n3 by the cloud; 10.0.0.4 pending; 10.0.0.5's request belongs to another object.
		eip("a", "10.0.0.1@n1", "10.0.0.2@n2", "10.0.0.3@n1", "10.0.0.5@n2"),
		eip("b"),
	}
	cpics := []*cloudv1.CloudPrivateIPConfig{
		cpic("10.0.0.1", "a", "n1", "ok@n1"),
		cpic("10.0.0.3", "a", "n3", "ok@n1"),
		cpic("10.0.0.4", "a", "n2", "pending"),
		cpic("10.0.0.5", "b", "n2", "ok@n2"),
		deleting(cpic("10.0.0.6", "a", "n2", "ok@n2")), // being released: not held
		cpic("10.0.0.7", "", "n2", "ok@n2"),            // not an egress IP request
		cpic("fc00::7", "b", "n1", ""),                 // just created
	}
	got := map[string][]ovnv1.EgressIPStatusItem{}
	for _, e := range Held(eips, cpics) {
		got[e.Name] = e.Status.Items
	}
	want := map[string][]ovnv1.EgressIPStatusItem{
		"a": items("10.0.0.1@n1", "10.0.0.3@n3", "10.0.0.4@n2"),
		"b": items("10.0.0.5@n2", "fc00::7@n1"),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Held\n got %v\nwant %v", got, want)
	}
	if len(eips[0].Status.Items) != 4 {
		t.Error("Held modified its input")
	}
}

func opStrings(ops []Op) []string {
	var out []string
	for _, o := range ops {
		s := fmt.Sprintf("%s %s", o.Kind, o.IP)
		if o.Node != "" {
			s += " to " + o.Node
		}
		out = append(out, s)
	}
	return out
}

func TestReconcile(t *testing.T) {
	live := func(n string) bool { return n != "gone" }
	for _, tc := range []struct {
		name    string
		desired []ovnv1.EgressIPStatusItem
		cpics   []*cloudv1.CloudPrivateIPConfig
		status  []ovnv1.EgressIPStatusItem
		ops     []string
		events  []string
	}{{
		name:    "new assignment: requested, not published",
		desired: items("10.0.0.1@n1"),
		ops:     []string{"create 10.0.0.1 to n1"},
	}, {
		name:    "pending: nothing to do, nothing published",
		desired: items("10.0.0.1@n1"),
		cpics:   []*cloudv1.CloudPrivateIPConfig{cpic("10.0.0.1", "a", "n1", "pending")},
	}, {
		name:    "confirmed: published",
		desired: items("10.0.0.1@n1", "fc00::1@n2"),
		cpics:   []*cloudv1.CloudPrivateIPConfig{cpic("10.0.0.1", "a", "n1", "ok@n1"), cpic("fc00::1", "a", "n2", "ok@n2")},
		status:  items("10.0.0.1@n1", "fc00::1@n2"),
	}, {
		name:    "the cloud's success on another node than the spec's is not a confirmation",
		desired: items("10.0.0.1@n2"),
		cpics:   []*cloudv1.CloudPrivateIPConfig{cpic("10.0.0.1", "a", "n2", "ok@n1")},
	}, {
		name:    "moved by the assignment: unpublished, then the request is updated",
		desired: items("10.0.0.1@n2"),
		cpics:   []*cloudv1.CloudPrivateIPConfig{cpic("10.0.0.1", "a", "n1", "ok@n1")},
		ops:     []string{"move 10.0.0.1 to n2"},
	}, {
		name:    "the cloud failed on a live node: kept as it is, as upstream, and reported",
		desired: items("10.0.0.1@n1"),
		cpics:   []*cloudv1.CloudPrivateIPConfig{cpic("10.0.0.1", "a", "n1", "error@n1")},
		events:  []string{"CloudAssignmentFailed: egress IP: 10.0.0.1 for object EgressIP: a was not assigned to node n1 by the cloud: Error processing cloud assignment request, err: quota"},
	}, {
		name:    "the cloud failed on a node since deleted: the request is deleted to be made again",
		desired: items("10.0.0.1@n2"),
		cpics:   []*cloudv1.CloudPrivateIPConfig{cpic("10.0.0.1", "a", "n2", "error@gone")},
		ops:     []string{"delete 10.0.0.1"},
		events:  []string{"CloudAssignmentRetry: egress IP: 10.0.0.1 previously failed on deleted node gone (reason: Error processing cloud assignment request, err: quota), will retry assignment"},
	}, {
		name:    "no longer wanted: released (after the status is written)",
		desired: items("10.0.0.1@n1"),
		cpics:   []*cloudv1.CloudPrivateIPConfig{cpic("10.0.0.1", "a", "n1", "ok@n1"), cpic("10.0.0.2", "a", "n2", "ok@n2"), cpic("10.0.0.3", "b", "n2", "ok@n2")},
		status:  items("10.0.0.1@n1"),
		ops:     []string{"delete 10.0.0.2"},
	}, {
		name:    "still being released: asked again once gone",
		desired: items("10.0.0.1@n1"),
		cpics:   []*cloudv1.CloudPrivateIPConfig{deleting(cpic("10.0.0.1", "a", "n1", "ok@n1"))},
	}, {
		name:    "the IP's request is not this object's",
		desired: items("10.0.0.1@n1", "10.0.0.2@n2"),
		cpics:   []*cloudv1.CloudPrivateIPConfig{cpic("10.0.0.1", "b", "n1", "ok@n1"), cpic("10.0.0.2", "", "n2", "ok@n2")},
		events: []string{
			"CloudAssignmentFailed: egress IP: 10.0.0.1 for object EgressIP: a could not be created, err: CloudPrivateIPConfig 10.0.0.1 exists and was requested for EgressIP b",
			"CloudAssignmentFailed: egress IP: 10.0.0.2 for object EgressIP: a could not be created, err: CloudPrivateIPConfig 10.0.0.2 exists and was not requested for an EgressIP",
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			p := Reconcile("a", tc.desired, tc.cpics, live)
			var evs []string
			for _, e := range p.Events {
				if e.EgressIP != "a" || e.Type != "Warning" {
					t.Errorf("event %+v", e)
				}
				evs = append(evs, e.Reason+": "+e.Message)
			}
			if len(p.Status) == 0 {
				p.Status = nil
			}
			if len(tc.status) == 0 {
				tc.status = nil
			}
			if !reflect.DeepEqual(p.Status, tc.status) || !reflect.DeepEqual(opStrings(p.Ops), tc.ops) || !reflect.DeepEqual(evs, tc.events) {
				t.Errorf("Reconcile\n got status %v ops %q events %q\nwant status %v ops %q events %q", p.Status, opStrings(p.Ops), evs, tc.status, tc.ops, tc.events)
			}
		})
	}
}

func TestOrphans(t *testing.T) {
	cpics := []*cloudv1.CloudPrivateIPConfig{
		cpic("10.0.0.1", "a", "n1", "ok@n1"),
		cpic("10.0.0.2", "gone", "n1", "ok@n1"),
		deleting(cpic("10.0.0.3", "gone", "n1", "ok@n1")),
		cpic("10.0.0.4", "", "n1", "ok@n1"),
	}
	if got := opStrings(Orphans([]*ovnv1.EgressIP{eip("a")}, cpics)); !reflect.DeepEqual(got, []string{"delete 10.0.0.2"}) {
		t.Errorf("Orphans = %q", got)
	}
}
