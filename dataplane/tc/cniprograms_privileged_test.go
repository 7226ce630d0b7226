package tc_test

import (
	"fmt"
	"net"
	"os"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/egressd/egressd/dataplane/tc"
	"github.com/egressd/egressd/test/netns"
	"github.com/egressd/egressd/test/privileged"
)

// asCilium does at ingress of ifname what Cilium's loader does after a pod's CNI ADD: it
// appends its program to the tcx chain, then deletes every filter of the hook.
func asCilium(t *testing.T, ifname string) error {
	t.Helper()
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return err
	}
	if err := foreignAt(t, ifi.Index); err != nil {
		return err
	}
	l, err := netlink.LinkByIndex(ifi.Index)
	if err != nil {
		return err
	}
	filters, err := netlink.FilterList(l, netlink.HANDLE_MIN_INGRESS)
	if err != nil {
		return err
	}
	for _, f := range filters {
		if err := netlink.FilterDel(f); err != nil {
			return err
		}
	}
	return nil
}

// TestPrivilegedLinkFirstWhereTheCNIRunsPrograms: on a node whose CNI adds its own program to
// a pod's interface after the CNI ADD and deletes the hook's filters as it does (Cilium),
// egressd's classifier on a new interface is a tcx link from the start, first in the chain, so
// the CNI's arrival leaves it in place: no moment in which the pod's packets meet only the
// CNI's program. It learns it from the first interface where it found such a program, or
// from Cilium's cilium_host device before any.
func TestPrivilegedLinkFirstWhereTheCNIRunsPrograms(t *testing.T) {
	privileged.Require(t)
	ns, root := podNS(t, "cniprogs")
	peer := netns.New(t, fmt.Sprintf("egressd-tcq-cniprogs-%d", os.Getpid()))
	netns.Veth(t, ns, "pod1", peer, "eth0")
	err := ns.Do(func() error {
		c, in, _, err := bothHooks(t, root)
		if err != nil {
			return err
		}
		index := func(name string) int { ifi, _ := net.InterfaceByName(name); return ifi.Index }
		want := map[string]int{"pod0": index("pod0")}
		if errs := tc.Sync(want, in); len(errs) > 0 {
			return fmt.Errorf("%v", errs)
		}
		if got := ingress(t); len(got) != 1 || !contains(got[0], "tc filter") {
			return fmt.Errorf("pod0 alone, no CNI program seen yet: ingress runs %q, want egressd's filter", got)
		}
		// The first pod: the CNI's program deletes egressd's filter; egressd attaches again
		// (the agent hears of the deletion from the kernel's events: Recheck).
		if err := asCilium(t, "pod0"); err != nil {
			return err
		}
		in.Recheck(want["pod0"])
		if errs := tc.Sync(want, in); len(errs) > 0 {
			return fmt.Errorf("%v", errs)
		}
		id := programID(t, c.Program)
		if got := ingress(t); len(got) != 2 || !contains(got[0], "tcx link") || !contains(got[0], fmt.Sprintf("egressd_frompod %d", id)) {
			return fmt.Errorf("pod0 after the CNI's program: ingress runs %q, want egressd's tcx link first", got)
		}
		// The next pod: a tcx link at once, which the CNI's arrival leaves first.
		want["pod1"] = index("pod1")
		if errs := tc.Sync(want, in); len(errs) > 0 {
			return fmt.Errorf("%v", errs)
		}
		if err := asCilium(t, "pod1"); err != nil {
			return err
		}
		progs, err := tc.Query("pod1")
		if err != nil {
			return err
		}
		if len(progs) != 2 || progs[0].Name != "egressd_frompod" || !contains(progs[0].Attachment, "tcx link") || progs[1].Name != "cni_prog" {
			return fmt.Errorf("pod1, attached after a CNI program was seen, then the CNI's arrival: ingress runs %+v, want egressd's tcx link, then the CNI's", progs)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestPrivilegedLinkFirstOnACiliumNode: where Cilium's cilium_host device is up, the first
// pod's interface gets a tcx link already.
func TestPrivilegedLinkFirstOnACiliumNode(t *testing.T) {
	privileged.Require(t)
	ns, root := podNS(t, "ciliumhost")
	ns.MustRun(t, "ip", "link", "add", "cilium_host", "type", "veth", "peer", "name", "cilium_net") // as Cilium makes them
	err := ns.Do(func() error {
		_, in, _, err := bothHooks(t, root)
		if err != nil {
			return err
		}
		ifi, err := net.InterfaceByName("pod0")
		if err != nil {
			return err
		}
		if errs := tc.Sync(map[string]int{"pod0": ifi.Index}, in); len(errs) > 0 {
			return fmt.Errorf("%v", errs)
		}
		if got := ingress(t); len(got) != 1 || !contains(got[0], "tcx link") || !contains(got[0], "egressd_frompod") {
			return fmt.Errorf("first pod on a Cilium node: ingress runs %q, want egressd's tcx link", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
