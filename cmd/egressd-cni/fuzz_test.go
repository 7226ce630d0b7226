package main

import (
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/egressd/egressd/nodeagent/cniserver/cniapi"
)

// The runtime hands the plugin its network configuration on stdin, with the previous plugin's
// result, and the pod in CNI_ARGS. Whatever they hold, parsing them never panics; a refusal is
// a CNI error of the documented codes; an accepted configuration has a socket and a positive
// timeout, and a prevResult when one is needed; the request for egressd names the pod when it
// must, carries every address of prevResult (valid prefixes, IPv4 unmapped) with the name of
// its interface, survives the trip over the socket unchanged, and leaves egressd less time
// than the plugin waits; and prevResult prints back at the configuration's version.
func FuzzStdin(f *testing.F) {
	const sock = `"socket":"/run/egressd/cni.sock"`
	prev031 := `{"cniVersion":"0.3.1","interfaces":[{"name":"veth1","mac":"ee:ee:ee:ee:ee:ee"},{"name":"eth0","mac":"0a:00:00:00:00:01","sandbox":"/run/netns/x"}],` +
		`"ips":[{"version":"4","address":"10.244.0.5/24","gateway":"10.244.0.1","interface":1}]}`
	for _, s := range []struct{ stdin, args string }{
		{`{"cniVersion":"1.1.0","name":"lab","type":"egressd-cni",` + sock + `,"prevResult":` + prevResult + `}`, podArgs},
		{`{"cniVersion":"1.1.0","name":"lab","type":"egressd-cni",` + sock + `,"timeout":"300ms","failOpen":true,"prevResult":` + prevResult + `}`, podArgs},
		{`{"cniVersion":"0.3.1","name":"lab","type":"egressd-cni",` + sock + `,"prevResult":` + prev031 + `}`, podArgs},
		{`{"cniVersion":"1.1.0","name":"lab","type":"egressd-cni",` + sock + `}`, podArgs},
		{`{"cniVersion":"1.1.0","name":"lab","type":"egressd-cni",` + sock + `,"timeout":"soon","prevResult":` + prevResult + `}`, podArgs},
		{`{"cniVersion":"0.2.0","name":"lab","type":"egressd-cni",` + sock + `,"prevResult":` + prevResult + `}`, podArgs},
		{`{"cniVersion":"1.1.0","name":"lab","type":"egressd-cni",` + sock + `,"cni.dev/valid-attachments":[]}`, ""},
		{`{"cniVersion":"1.1.0","name":"lab","type":"egressd-cni",` + sock + `,"prevResult":{"cniVersion":"1.1.0","ips":[{"address":"::ffff:10.244.0.5/120","interface":0}],"interfaces":[{"name":"eth0","sandbox":"/run/netns/x"}]}}`, podArgs},
		{`{"cniVersion":"1.1.0","name":"lab","type":"egressd-cni",` + sock + `,"timeout":"1000000h","prevResult":` + prevResult + `}`, podArgs},
		{`{"cniVersion":"1.1.0","name":"x","type":"egressd-cni",`, podArgs},
		{`{"cniVersion":"1.1.0","name":"lab","type":"egressd-cni",` + sock + `,"prevResult":` + prevResult + `}`, "K8S_POD_NAMESPACE=ns"},
		{`{"cniVersion":"1.1.0","name":"lab","type":"egressd-cni",` + sock + `,"prevResult":` + prevResult + `}`, "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web;K8S_POD_UID=123;UNKNOWN=1"},
	} {
		f.Add([]byte(s.stdin), s.args)
	}
	f.Fuzz(func(t *testing.T, stdin []byte, cniArgs string) {
		var confs [2]*netConf
		for i, needPrev := range []bool{false, true} {
			c, err := parseConf(stdin, needPrev)
			if err != nil {
				var cerr *types.Error
				if c != nil || !errors.As(err, &cerr) || (cerr.Code != types.ErrDecodingFailure && cerr.Code != types.ErrInvalidNetworkConfig) {
					t.Fatalf("parseConf: %v (%T), config %+v: want a CNI error of code 6 or 7 and no config", err, err, c)
				}
				continue
			}
			if c.Socket == "" || c.timeout <= 0 || (needPrev && c.PrevResult == nil) {
				t.Fatalf("parseConf accepted socket %q, timeout %v, prevResult %v", c.Socket, c.timeout, c.PrevResult)
			}
			confs[i] = c
		}
		if confs[1] != nil && confs[0] == nil {
			t.Fatalf("a configuration valid with prevResult required is refused without")
		}
		c := confs[0]
		if c == nil {
			return
		}
		var prev *current.Result
		if c.PrevResult != nil {
			if out, err := c.PrevResult.GetAsVersion(c.CNIVersion); err != nil || out == nil {
				t.Fatalf("prevResult does not print at the configuration's version %q: %v", c.CNIVersion, err)
			}
			var err error
			if prev, err = current.NewResultFromResult(c.PrevResult); err != nil {
				prev = nil
			}
		}
		args := &skel.CmdArgs{ContainerID: "sandbox1", Netns: "/run/netns/x", IfName: "eth0", Args: cniArgs, StdinData: stdin}
		for _, strict := range []bool{true, false} {
			req, err := request(args, c, strict)
			if err != nil {
				var cerr *types.Error
				if req != nil || !errors.As(err, &cerr) || (cerr.Code != types.ErrInvalidEnvironmentVariables && cerr.Code != types.ErrDecodingFailure) {
					t.Fatalf("request: %v, %+v: want a CNI error of code 4 or 6 and no request", err, req)
				}
				continue
			}
			if strict && (req.Namespace == "" || req.Name == "") {
				t.Fatalf("request without the pod's namespace or name: %+v", req)
			}
			if req.ContainerID != args.ContainerID || req.Netns != args.Netns || req.IfName != args.IfName {
				t.Fatalf("request for sandbox %q %q %q", req.ContainerID, req.Netns, req.IfName)
			}
			if req.Timeout > c.timeout || (c.timeout >= 10 && req.Timeout <= 0) {
				t.Fatalf("egressd is given %v when the plugin waits %v", req.Timeout, c.timeout)
			}
			// prevResult's addresses in order (an entry without one has nothing to send).
			var sent int
			if prev != nil {
				for _, p := range prev.IPs {
					a, ok := netip.AddrFromSlice(p.Address.IP)
					if !ok {
						continue
					}
					if sent == len(req.IPs) {
						t.Fatalf("address %v of prevResult not sent: %+v", a, req.IPs)
					}
					ip := req.IPs[sent]
					sent++
					if !ip.Address.IsValid() || ip.Address.Addr() != a.Unmap() {
						t.Fatalf("address %v of prevResult sent as %v", p.Address.String(), ip.Address)
					}
					if n := p.Interface; n != nil && *n >= 0 && *n < len(prev.Interfaces) && ip.Interface != prev.Interfaces[*n].Name {
						t.Fatalf("address %v on interface %q, prevResult says %q", ip.Address, ip.Interface, prev.Interfaces[*n].Name)
					}
				}
			}
			if sent != len(req.IPs) {
				t.Fatalf("request addresses %+v, more than prevResult's", req.IPs)
			}
			b, err := json.Marshal(req)
			var back cniapi.Request
			if err != nil || json.Unmarshal(b, &back) != nil || !slices.Equal(back.IPs, req.IPs) || back.Timeout != req.Timeout {
				t.Fatalf("the request does not survive the socket: %s (%v)", b, err)
			}
		}
	})
}
