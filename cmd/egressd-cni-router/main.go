// Command egressd-cni-router configures an EgressRouter's router pod (macvlan, addresses,
// routes, nftables: dataplane/router) for egressd-cni, which runs it from its own directory on
// the ADD of a router pod only, in the node's network namespace, with the configuration
// egressd answered: cniapi.RouterSetup on stdin, a cniapi.RouterResult with Master and Error
// on stdout. It exits 0 whenever it wrote a result, failed or not, and 1 with the cause on
// stderr when it could not read its input.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/egressd/egressd/dataplane/router"
	"github.com/egressd/egressd/nodeagent/cniserver/cniapi"
)

func main() { os.Exit(run(os.Stdin, os.Stdout, os.Stderr)) }

func run(stdin io.Reader, stdout, stderr io.Writer) int {
	var in cniapi.RouterSetup
	if err := json.NewDecoder(stdin).Decode(&in); err != nil {
		fmt.Fprintf(stderr, "%s: read the router setup: %v\n", cniapi.RouterHelper, err)
		return 1
	}
	var res cniapi.RouterResult
	var c router.Config
	if err := json.Unmarshal(in.Config, &c); err != nil {
		res.Error = fmt.Sprintf("the router's configuration: %v", err)
	} else {
		done, err := router.Apply(&c, in.Netns, in.IfName)
		res.Master = done.Master
		if err != nil {
			res.Error = err.Error()
		}
	}
	if err := json.NewEncoder(stdout).Encode(res); err != nil {
		fmt.Fprintf(stderr, "%s: write the outcome: %v\n", cniapi.RouterHelper, err)
		return 1
	}
	return 0
}
