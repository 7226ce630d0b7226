package kernel

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"github.com/egressd/egressd/test/netns"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedLinksKeptByEvents: while the link events are watched, a sync lists the
// namespace's interfaces once and then reads again only those the events named, and what it
// reads is what a fresh list says (names, types, bridges' ports) after veths come, join a
// bridge, are renamed and go; an interface no event named is not read again. Unwatched, or
// past maxReadAgain events, every sync lists them.
func TestPrivilegedLinksKeptByEvents(t *testing.T) {
	privileged.Require(t)
	node, pods := netns.New(t, "node"), netns.New(t, "pods")
	ns, err := vnetns.GetFromPath(node.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	updates, done := make(chan netlink.LinkUpdate, 256), make(chan struct{})
	defer close(done)
	if err := netlink.LinkSubscribeAt(ns, updates, done); err != nil {
		t.Fatal(err)
	}
	f := &facings{h: h, byAddr: map[netip.Addr]facing{}, readAgain: map[int]bool{}}
	f.watched(true)
	// deliver hands f the events so far, as the watcher does.
	deliver := func() {
		t.Helper()
		time.Sleep(100 * time.Millisecond)
		for {
			select {
			case u := <-updates:
				f.linkChanged(int(u.Index))
			default:
				return
			}
		}
	}
	same := func(what string) {
		t.Helper()
		ls, err := f.links()
		if err != nil {
			t.Fatal(err)
		}
		want, err := h.LinkList()
		if err != nil {
			t.Fatal(err)
		}
		if got, want := describe(slices.Collect(maps.Values(ls.byIndex))), describe(want); !slices.Equal(got, want) {
			t.Errorf("%s: links %v, want %v", what, got, want)
		}
		for m, ports := range ls.ports {
			if l := ls.byIndex[m]; l == nil || l.Type() != "bridge" || len(ports) == 0 {
				t.Errorf("%s: ports of %d: %v", what, m, describe(ports))
			}
		}
	}
	same("first list")

	node.MustRun(t, "ip", "link", "add", "br0", "type", "bridge")
	netns.Veth(t, node, "v0", pods, "eth0")
	netns.Veth(t, node, "v1", pods, "eth1")
	node.MustRun(t, "ip", "link", "set", "v0", "master", "br0")
	if ls, err := f.links(); err != nil {
		t.Fatal(err)
	} else if ls.byName["br0"] != nil {
		t.Fatalf("the interfaces were listed again though no event was delivered")
	}
	deliver()
	same("veths added, one enslaved")

	node.MustRun(t, "ip", "link", "set", "v1", "master", "br0")
	node.MustRun(t, "ip", "link", "set", "v0", "nomaster")
	node.MustRun(t, "ip", "link", "set", "v0", "down")
	node.MustRun(t, "ip", "link", "set", "v0", "name", "w0")
	deliver()
	same("ports swapped, one renamed")

	node.MustRun(t, "ip", "link", "del", "w0")
	node.MustRun(t, "ip", "link", "del", "br0")
	deliver()
	same("deleted")

	node.MustRun(t, "ip", "link", "add", "quiet0", "type", "bridge")
	for i := range maxReadAgain + 1 {
		f.linkChanged(10000 + i)
	}
	same("past maxReadAgain events")

	f.watched(false)
	node.MustRun(t, "ip", "link", "add", "quiet1", "type", "bridge")
	same("unwatched")
}

func describe(links []netlink.Link) []string {
	var out []string
	for _, l := range links {
		out = append(out, fmt.Sprintf("%d %s %s master %d", l.Attrs().Index, l.Attrs().Name, l.Type(), l.Attrs().MasterIndex))
	}
	slices.Sort(out)
	return out
}
