package main

import (
	"fmt"

	flag "github.com/spf13/pflag"
)

// apiRate is how fast a process may send requests to the API server: client-go's token bucket,
// as the kubelet's --kube-api-qps and --kube-api-burst. Every node runs an agent, so the
// cluster's API servers see the agents' rate times the nodes (their priority and fairness
// queues the excess); a burst is where a controller's statuses for many new objects go.
type apiRate struct {
	qps   float32
	burst int
}

func (r *apiRate) declare(fs *flag.FlagSet, qps float32, burst int, whose string) {
	fs.Float32Var(&r.qps, "kube-api-qps", qps, fmt.Sprintf("requests per second %s may send to the API server, after --kube-api-burst", whose))
	fs.IntVar(&r.burst, "kube-api-burst", burst, fmt.Sprintf("requests %s may send to the API server at once before --kube-api-qps paces it", whose))
}

func (r apiRate) check(bad func(flag, format string, a ...any)) {
	if r.qps <= 0 {
		bad("kube-api-qps", "%v: must be above 0", r.qps)
	}
	if r.burst < 1 {
		bad("kube-api-burst", "%d: must be at least 1", r.burst)
	}
}
