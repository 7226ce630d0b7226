package kernel_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A kernelWrite is one syscall by which the Applier changes the kernel, stopped before the
// kernel runs it: a bpf command that writes (map update or delete, link create or update), a
// route or netfilter netlink message that changes something, or the removal of a pinned
// object.
type kernelWrite struct {
	// Kind is "bpf:update", "bpf:delete" (an element or a batch), "bpf:link", "bpf:link-update", "unlink", "nft" (a
	// netfilter batch with changes in it) or the rtnetlink message type ("RTM_NEWRULE", ...).
	Kind string
	// Detail: the netlink message types of an nft batch, the path unlinked.
	Detail string
}

func (w kernelWrite) String() string {
	if w.Detail == "" {
		return w.Kind
	}
	return w.Kind + "(" + w.Detail + ")"
}

// seccomp_notif and seccomp_notif_resp (linux/seccomp.h), missing from x/sys/unix.
type seccompNotif struct {
	ID    uint64
	Pid   uint32
	Flags uint32
	Nr    int32
	Arch  uint32
	IP    uint64
	Args  [6]uint64
}

type seccompNotifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

const (
	seccompFilterFlagWaitKillableRecv = 1 << 5 // SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (5.19)
	bpfMapUpdateElem                  = 2
	bpfMapDeleteElem                  = 3
	bpfLinkCreate                     = 28
	bpfLinkUpdate                     = 29
	bpfMapUpdateBatch                 = 26
	bpfMapDeleteBatch                 = 27
	nfnlMsgBatchBegin                 = 0x10
	nfnlMsgBatchEnd                   = 0x11
)

var auditArch = map[string]uint32{"amd64": unix.AUDIT_ARCH_X86_64, "arm64": unix.AUDIT_ARCH_AARCH64}

// watchWrites runs f on a new thread locked to the network namespace enter sets (and discarded
// afterwards), with every syscall of that thread that can change the kernel (bpf, sendto,
// sendmsg, unlinkat) held until before(w) has looked at the kernel as it is before that write.
// Since f's thread is the only writer, before sees every state the kernel passes through on
// the way (the final one is left to the caller). It returns f's error and the writes in order.
func watchWrites(enter func() error, f func() error, before func(kernelWrite)) ([]kernelWrite, error) {
	arch, ok := auditArch[runtime.GOARCH]
	if !ok {
		return nil, fmt.Errorf("no seccomp audit arch for %s", runtime.GOARCH)
	}
	type started struct {
		listener int
		err      error
	}
	start := make(chan started, 1)
	proceed := make(chan struct{})
	result := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the filtered thread dies with this goroutine
		if err := enter(); err != nil {
			start <- started{err: err}
			return
		}
		fd, err := installFilter(arch)
		start <- started{listener: fd, err: err}
		if err != nil {
			return
		}
		<-proceed
		result <- f()
	}()
	s := <-start
	if s.err != nil {
		return nil, s.err
	}
	defer unix.Close(s.listener)
	var (
		mu     sync.Mutex
		writes []kernelWrite
		stop   atomic.Bool
		done   = make(chan error, 1)
	)
	go func() {
		done <- serveNotifications(s.listener, &stop, func(n *seccompNotif) {
			w, ok := classify(n)
			if !ok {
				return
			}
			before(w)
			mu.Lock()
			writes = append(writes, w)
			mu.Unlock()
		})
	}()
	close(proceed)
	err := <-result
	stop.Store(true)
	if serr := <-done; serr != nil {
		err = errors.Join(err, serr)
	}
	mu.Lock()
	defer mu.Unlock()
	return writes, err
}

// installFilter makes bpf, sendto, sendmsg and unlinkat of the calling thread wait for the
// returned listener.
func installFilter(arch uint32) (int, error) {
	const notify, allow = unix.SECCOMP_RET_USER_NOTIF, unix.SECCOMP_RET_ALLOW
	calls := []uint32{unix.SYS_BPF, unix.SYS_SENDTO, unix.SYS_SENDMSG, unix.SYS_UNLINKAT}
	prog := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 4}, // seccomp_data.arch
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: arch, Jt: 1},
		{Code: unix.BPF_RET | unix.BPF_K, K: allow},
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0}, // seccomp_data.nr
	}
	for i, nr := range calls {
		// Jump to the notify return after the remaining comparisons and the allow return.
		prog = append(prog, unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: nr, Jt: uint8(len(calls) - i)})
	}
	prog = append(prog, unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: allow}, unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: notify})
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	var err error
	for _, flags := range []uintptr{unix.SECCOMP_FILTER_FLAG_NEW_LISTENER | seccompFilterFlagWaitKillableRecv, unix.SECCOMP_FILTER_FLAG_NEW_LISTENER} {
		fd, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fprog)))
		runtime.KeepAlive(prog)
		if errno == 0 {
			return int(fd), nil
		}
		err = fmt.Errorf("seccomp filter with a listener: %w", errno)
	}
	return -1, err
}

// serveNotifications lets each held syscall go on after seen, until stop.
func serveNotifications(listener int, stop *atomic.Bool, seen func(*seccompNotif)) error {
	for !stop.Load() {
		pfd := []unix.PollFd{{Fd: int32(listener), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, 20)
		if errors.Is(err, unix.EINTR) || n == 0 {
			continue
		}
		if err != nil {
			return fmt.Errorf("poll seccomp listener: %w", err)
		}
		if pfd[0].Revents&unix.POLLHUP != 0 {
			return nil
		}
		var notif seccompNotif
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(listener), unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&notif))); errno != 0 {
			if errno == unix.EINTR || errno == unix.ENOENT {
				continue
			}
			return fmt.Errorf("seccomp notification: %w", errno)
		}
		seen(&notif)
		resp := seccompNotifResp{ID: notif.ID, Flags: unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE}
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(listener), unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(&resp))); errno != 0 && errno != unix.ENOENT {
			return fmt.Errorf("seccomp response: %w", errno)
		}
	}
	return nil
}

// peek reads n bytes at addr of task pid (this process: its threads share the memory).
func peek(pid int, addr uint64, n int) []byte {
	if n <= 0 || addr == 0 {
		return nil
	}
	buf := make([]byte, n)
	got, err := unix.ProcessVMReadv(pid, []unix.Iovec{{Base: &buf[0], Len: uint64(n)}}, []unix.RemoteIovec{{Base: uintptr(addr), Len: n}}, 0)
	if err != nil {
		return nil
	}
	return buf[:got]
}

var rtmNames = map[uint16]string{
	unix.RTM_NEWADDR: "RTM_NEWADDR", unix.RTM_DELADDR: "RTM_DELADDR",
	unix.RTM_NEWROUTE: "RTM_NEWROUTE", unix.RTM_DELROUTE: "RTM_DELROUTE",
	unix.RTM_NEWRULE: "RTM_NEWRULE", unix.RTM_DELRULE: "RTM_DELRULE",
	unix.RTM_NEWNEXTHOP: "RTM_NEWNEXTHOP", unix.RTM_DELNEXTHOP: "RTM_DELNEXTHOP",
	unix.RTM_NEWQDISC: "RTM_NEWQDISC", unix.RTM_DELQDISC: "RTM_DELQDISC",
	unix.RTM_NEWTFILTER: "RTM_NEWTFILTER", unix.RTM_DELTFILTER: "RTM_DELTFILTER",
}

// classify names a held syscall if it is a write (reads and other sockets' traffic are not).
func classify(n *seccompNotif) (kernelWrite, bool) {
	pid := int(n.Pid)
	switch int(n.Nr) {
	case unix.SYS_BPF:
		switch n.Args[0] {
		case bpfMapUpdateElem, bpfMapUpdateBatch:
			return kernelWrite{Kind: "bpf:update"}, true
		case bpfMapDeleteElem, bpfMapDeleteBatch:
			return kernelWrite{Kind: "bpf:delete"}, true
		case bpfLinkCreate:
			return kernelWrite{Kind: "bpf:link"}, true
		case bpfLinkUpdate:
			return kernelWrite{Kind: "bpf:link-update"}, true
		}
		return kernelWrite{}, false
	case unix.SYS_UNLINKAT:
		path := peek(pid, n.Args[1], 4096)
		if i := strings.IndexByte(string(path), 0); i >= 0 {
			path = path[:i]
		}
		return kernelWrite{Kind: "unlink", Detail: string(path)}, true
	case unix.SYS_SENDTO, unix.SYS_SENDMSG:
	default:
		return kernelWrite{}, false
	}
	fd := int(n.Args[0])
	if dom, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN); err != nil || dom != unix.AF_NETLINK {
		return kernelWrite{}, false
	}
	proto, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL)
	if err != nil {
		return kernelWrite{}, false
	}
	var msg []byte
	if int(n.Nr) == unix.SYS_SENDTO {
		msg = peek(pid, n.Args[1], int(min(n.Args[2], 1<<16)))
	} else {
		hdr := peek(pid, n.Args[1], int(unsafe.Sizeof(unix.Msghdr{})))
		if len(hdr) < int(unsafe.Sizeof(unix.Msghdr{})) {
			return kernelWrite{}, false
		}
		// struct msghdr: name, namelen (+pad), iov, iovlen, ...
		iov := peek(pid, binary.NativeEndian.Uint64(hdr[16:]), 16)
		if binary.NativeEndian.Uint64(hdr[24:]) == 0 || len(iov) < 16 {
			return kernelWrite{}, false
		}
		msg = peek(pid, binary.NativeEndian.Uint64(iov), int(min(binary.NativeEndian.Uint64(iov[8:]), 1<<16)))
	}
	var types []uint16
	for len(msg) >= unix.SizeofNlMsghdr {
		l := int(binary.NativeEndian.Uint32(msg))
		types = append(types, binary.NativeEndian.Uint16(msg[4:]))
		if l < unix.SizeofNlMsghdr || l > len(msg) {
			break
		}
		msg = msg[min((l+3)&^3, len(msg)):]
	}
	if len(types) == 0 {
		return kernelWrite{}, false
	}
	switch proto {
	case unix.NETLINK_ROUTE:
		name, ok := rtmNames[types[0]]
		return kernelWrite{Kind: name}, ok
	case unix.NETLINK_NETFILTER:
		if types[0] != nfnlMsgBatchBegin {
			return kernelWrite{}, false // a read (list, get)
		}
		var inner []string
		for _, t := range types[1:] {
			if t != nfnlMsgBatchEnd {
				inner = append(inner, fmt.Sprintf("%#x", t))
			}
		}
		if len(inner) == 0 {
			return kernelWrite{}, false
		}
		return kernelWrite{Kind: "nft", Detail: strings.Join(inner, " ")}, true
	}
	return kernelWrite{}, false
}

// firstIndex is the position of the first write of kind (prefix match), -1 if none.
func firstIndex(writes []kernelWrite, kind string) int {
	for i, w := range writes {
		if strings.HasPrefix(w.Kind, kind) {
			return i
		}
	}
	return -1
}

// lastIndex is the position of the last write of kind (prefix match), -1 if none.
func lastIndex(writes []kernelWrite, kind string) int {
	for i := len(writes) - 1; i >= 0; i-- {
		if strings.HasPrefix(writes[i].Kind, kind) {
			return i
		}
	}
	return -1
}

// count is the number of writes of kind (exact).
func count(writes []kernelWrite, kind string) int {
	n := 0
	for _, w := range writes {
		if w.Kind == kind {
			n++
		}
	}
	return n
}
