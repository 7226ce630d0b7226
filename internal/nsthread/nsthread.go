// Package nsthread keeps a goroutine's thread in a network namespace, for sockets opened later
// from that goroutine (BFD sessions, kernel event subscriptions made again).
package nsthread

import (
	"runtime"

	"github.com/vishvananda/netns"
)

// Lock locks the calling goroutine to its thread for good (the thread dies with the goroutine)
// and moves the thread into ns unless it is there already: setns(2) needs CAP_SYS_ADMIN (and
// the runtime's default seccomp profile blocks it without), even into the namespace a thread
// is in, which the agent, unprivileged in its own host-network pod, is.
func Lock(ns netns.NsHandle) error {
	runtime.LockOSThread()
	if cur, err := netns.Get(); err == nil {
		same := cur.Equal(ns)
		cur.Close()
		if same {
			return nil
		}
	}
	return netns.Set(ns)
}
