// Package version carries the build's version, set with
// -ldflags "-X github.com/egressd/egressd/internal/version.Version=<v>".
package version

import "runtime/debug"

// Version of this build.
var Version = "dev"

// String is the version with the VCS revision when the binary knows it.
func String() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				return Version + " (" + s.Value[:12] + ")"
			}
		}
	}
	return Version
}
