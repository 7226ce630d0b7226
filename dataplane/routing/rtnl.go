package routing

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// rtnl is a route netlink socket bound to one network namespace, for the messages
// vishvananda/netlink v1.3.1 cannot build or parse: nexthop objects (RTM_*NEXTHOP) and routes
// that point at one (RTA_NH_ID). Strict checking is on, so that route dumps are filtered by
// protocol in the kernel instead of copying a full routing table to user space.
type rtnl struct {
	sh *nl.SocketHandle
	// writes counts the changes sent to the kernel (tests assert that a repeated Apply sends none).
	writes int
}

func openRtnl() (*rtnl, error) {
	s, err := nl.GetNetlinkSocketAt(netns.None(), netns.None(), unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("route netlink socket: %w", err)
	}
	tv := nl.SocketTimeoutTv
	if err := errors.Join(s.SetSendTimeout(&tv), s.SetReceiveTimeout(&tv), s.SetExtAck(true)); err != nil {
		s.Close()
		return nil, err
	}
	// Without strict checking (kernels before 4.20) dumps are unfiltered; readers filter again.
	_ = unix.SetsockoptInt(s.GetFd(), unix.SOL_NETLINK, unix.NETLINK_GET_STRICT_CHK, 1)
	return &rtnl{sh: &nl.SocketHandle{Socket: s}}, nil
}

func (c *rtnl) close() { c.sh.Close() }

// header is a fixed message header (nhmsg, rtmsg) sent before the attributes.
type header []byte

func (h header) Len() int          { return len(h) }
func (h header) Serialize() []byte { return h }

func (c *rtnl) request(typ uint16, flags int, hdr header, attrs []*nl.RtAttr) *nl.NetlinkRequest {
	req := &nl.NetlinkRequest{
		NlMsghdr: unix.NlMsghdr{Len: unix.SizeofNlMsghdr, Type: typ, Flags: unix.NLM_F_REQUEST | uint16(flags)},
		Sockets:  map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: c.sh},
	}
	req.AddData(hdr)
	for _, a := range attrs {
		req.AddData(a)
	}
	return req
}

// write sends one change and waits for the kernel's acknowledgement.
func (c *rtnl) write(typ uint16, flags int, hdr header, attrs ...*nl.RtAttr) error {
	c.writes++
	_, err := c.request(typ, flags|unix.NLM_F_ACK, hdr, attrs).Execute(unix.NETLINK_ROUTE, 0)
	return err
}

// dump returns the payloads of a dump, retried when the kernel says it changed meanwhile.
func (c *rtnl) dump(typ, resType uint16, hdr header, attrs ...*nl.RtAttr) ([][]byte, error) {
	for try := 0; ; try++ {
		msgs, err := c.request(typ, unix.NLM_F_DUMP, hdr, attrs).Execute(unix.NETLINK_ROUTE, resType)
		if errors.Is(err, nl.ErrDumpInterrupted) && try < 5 {
			continue
		}
		return msgs, err
	}
}

func u32(v uint32) []byte { return nl.Uint32Attr(v) }
