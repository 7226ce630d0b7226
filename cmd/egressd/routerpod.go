package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/signal"
	"syscall"

	flag "github.com/spf13/pflag"

	"github.com/egressd/egressd/dataplane/router"
	"github.com/egressd/egressd/nodeagent/egressrouter"
)

// routerPod is the command of EgressRouter pods (egressd router-pod): the CNI plugin configured
// the router in the pod's network namespace before the container started; the container only
// holds that namespace until it is stopped. With --check (the readiness probe, run inside the
// container) it exits 0 only when the router's macvlan is up with every address. It needs no
// capability: reading links and addresses is unprivileged.
func routerPod(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("egressd router-pod", flag.ContinueOnError)
	fs.SetOutput(stderr)
	check := fs.Bool("check", false, "check the router's macvlan instead of running")
	addrs := fs.StringSlice("address", nil, "with --check: addresses (EgressRouter spec.addresses[].ip) the macvlan must hold")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *check {
		if err := checkRouter(*addrs); err != nil {
			fmt.Fprintln(stderr, "egress router not ready:", err)
			return 1
		}
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	fmt.Fprintf(stderr, "egressd router-pod: holding the network namespace of the egress router (%s=%s)\n", egressrouter.AppLabel, egressrouter.AppValue)
	<-ctx.Done()
	return 0
}

func checkRouter(want []string) error {
	ifi, err := net.InterfaceByName(router.Interface)
	if err != nil {
		return fmt.Errorf("interface %s: %w", router.Interface, err)
	}
	if ifi.Flags&net.FlagUp == 0 {
		return fmt.Errorf("interface %s is down", router.Interface)
	}
	have, err := ifi.Addrs()
	if err != nil {
		return err
	}
	for _, w := range want {
		p, err := netip.ParsePrefix(w)
		if err != nil {
			a, aerr := netip.ParseAddr(w)
			if aerr != nil {
				return fmt.Errorf("--address %q: %w", w, err)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		found := false
		for _, h := range have {
			if n, ok := h.(*net.IPNet); ok {
				a, _ := netip.AddrFromSlice(n.IP)
				found = found || a.Unmap() == p.Addr()
			}
		}
		if !found {
			return fmt.Errorf("%s does not hold %s", router.Interface, p.Addr())
		}
	}
	return nil
}
