package lab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/spawn"
)

// startDaemon runs argv in the node's network namespace until the lab closes, as a
// hostNetwork pod of a DaemonSet would, logging to <lab>/<name>@<node>.log, and waits until
// ready passes (an exit ends the wait at once, with the log's tail).
func (n *Node) startDaemon(ctx context.Context, name string, env []string, argv []string, ready func() error) error {
	logPath := filepath.Join(n.lab.Dir, name+"@"+n.Name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command("nsenter", append([]string{"--net=" + n.NS.Path()}, argv...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := spawn.Start(cmd); err != nil {
		logf.Close()
		return fmt.Errorf("start %s on %s: %w", name, n.Name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	n.lab.onClose(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-done:
			cancel()
		case <-wctx.Done():
		}
	}()
	err = poll.Until(wctx, name+" on "+n.Name+" ready", time.Minute, func() error {
		select {
		case <-done:
			return fmt.Errorf("%s exited", name)
		default:
		}
		return ready()
	})
	if err != nil {
		b, _ := os.ReadFile(logPath)
		return fmt.Errorf("%w\n%s", err, tail(string(b), 40))
	}
	return nil
}
