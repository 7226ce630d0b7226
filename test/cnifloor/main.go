// Command cnifloor is a chained CNI plugin that does only what every chained plugin must: it
// reads its network config and prevResult with the official skel and types, and prints
// prevResult back. Built as egressd-cni is (static, stripped), the time it adds to an ADD is the
// floor any chained Go plugin adds on the machine (the kernel's process set-up, the Go
// runtime's start, decoding and encoding): BenchmarkPrivilegedCNIAdd measures egressd-cni
// against it.
package main

import (
	"encoding/json"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

func main() {
	nothing := func(*skel.CmdArgs) error { return nil }
	skel.PluginMainFuncs(skel.CNIFuncs{Add: add, Check: nothing, Del: nothing}, version.All, "cnifloor: returns prevResult")
}

func add(args *skel.CmdArgs) error {
	c := &types.PluginConf{}
	if err := json.Unmarshal(args.StdinData, c); err != nil {
		return err
	}
	if err := version.ParsePrevResult(c); err != nil {
		return err
	}
	return types.PrintResult(c.PrevResult, c.CNIVersion)
}
