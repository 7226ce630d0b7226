package tc_test

import (
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/egressd/egressd/dataplane/tc"
	"github.com/egressd/egressd/test/netns"
	"github.com/egressd/egressd/test/privileged"
)

// BenchmarkPrivilegedAttach measures what attaching egressd's two programs (the classifier at
// ingress, its companion at egress) costs per pod interface when a sync finds 16 new ones, as
// when a kubelet starts 16 pods at once: by tc filters (the interfaces carry no other program)
// and by tcx links (a CNI's own tcx program is on each). It reports ms per interface and per
// sync; every tcx attach waits for an RCU grace period while holding the RTNL lock.
func BenchmarkPrivilegedAttach(b *testing.B) {
	privileged.Require(b)
	const batch = 16
	for _, mode := range []string{"filter", "tcx"} {
		b.Run(mode, func(b *testing.B) {
			node := netns.New(b, fmt.Sprintf("egressd-tcb-%s-%d", mode, os.Getpid()))
			pods := netns.New(b, fmt.Sprintf("egressd-tcbp-%s-%d", mode, os.Getpid()))
			root := fmt.Sprintf("/sys/fs/bpf/egressd-bench-tc-%s-%d", mode, os.Getpid())
			b.Cleanup(func() { os.RemoveAll(root) })
			err := node.Do(func() error {
				_, in, out, err := bothHooks(b, root)
				if err != nil {
					return err
				}
				want := map[string]int{}
				var spent time.Duration
				for i := range b.N {
					batchWant := map[string]int{}
					for j := range batch {
						name := fmt.Sprintf("v%d", i*batch+j)
						if err := netns.Link(node, name, pods, "p"+name); err != nil {
							return err
						}
						ifi, err := net.InterfaceByName(name)
						if err != nil {
							return err
						}
						if mode == "tcx" {
							if err := foreignAt(b, ifi.Index); err != nil {
								return err
							}
						}
						batchWant[name] = ifi.Index
					}
					for k, v := range batchWant {
						want[k] = v
					}
					start := time.Now()
					if errs := tc.Sync(want, in, out); len(errs) > 0 {
						return fmt.Errorf("%v", errs)
					}
					spent += time.Since(start)
				}
				perIf := float64(spent.Microseconds()) / 1000 / float64(b.N*batch)
				b.ReportMetric(perIf, "ms/interface")
				b.ReportMetric(perIf*batch, "ms/sync-of-16")
				b.Logf("%s: %d interfaces, %.2f ms each, %.1f ms per sync of %d new ones", mode, b.N*batch, perIf, perIf*batch, batch)
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		})
	}
}
