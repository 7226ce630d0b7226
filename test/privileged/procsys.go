package privileged

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ReadOnlyProcSys gives the calling thread a mount namespace of its own in which /proc/sys is
// read-only, as a container runtime mounts it for a container that is not privileged (the
// agent's). Call it on a thread that is discarded after (netns.NS.Do's).
func ReadOnlyProcSys() error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare the mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := unix.Mount("/proc/sys", "/proc/sys", "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind /proc/sys: %w", err)
	}
	if err := unix.Mount("", "/proc/sys", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("remount /proc/sys read-only: %w", err)
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/conf/lo/rp_filter", []byte("0"), 0o644); err == nil {
		return errors.New("/proc/sys is still writable")
	}
	return nil
}
