// Package spawn starts child processes that die with the test process (PR_SET_PDEATHSIG).
//
// The kernel delivers the parent-death signal when the *thread* that forked the child exits,
// and Go terminates threads: a goroutine that calls runtime.LockOSThread (as every network
// namespace helper does) and exits takes its thread with it, whichever thread that was. So
// children are forked from one dedicated thread that stays locked for the life of the process.
package spawn

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

type request struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	once     sync.Once
	requests = make(chan request)
)

// Start starts cmd so that it is killed (SIGKILL) when this process dies.
func Start(cmd *exec.Cmd) error {
	once.Do(func() {
		go func() {
			runtime.LockOSThread() // never unlocked: this thread must outlive every child
			for r := range requests {
				r.done <- r.cmd.Start()
			}
		}()
	})
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	done := make(chan error, 1)
	requests <- request{cmd, done}
	return <-done
}
