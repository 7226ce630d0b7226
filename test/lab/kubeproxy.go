package lab

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// The kube-proxy stand-in serves Services in every node, as kube-proxy's nftables mode does in
// spirit: a table inet labproxy whose nat chains (prerouting for pods, output for the node)
// DNAT each cluster IP, external IP and load-balancer ingress IP (but one in ipMode Proxy)
// and port to one of the
// Service's ready endpoints (numgen random), from the EndpointSlices. It rewrites the whole
// table in each node after any change.

// StartKubeProxy starts the kube-proxy stand-in, or the real kube-proxy (Options.KubeProxy),
// until the lab closes.
func (l *Lab) StartKubeProxy(ctx context.Context) error {
	if l.opts.KubeProxy == KubeProxyNone {
		return nil
	}
	if l.opts.KubeProxy != "" {
		return l.startRealKubeProxy(ctx, l.opts.KubeProxy)
	}
	ctx, cancel := context.WithCancel(ctx)
	f := informers.NewSharedInformerFactory(l.Client, 0)
	svcs := f.Core().V1().Services()
	epSlices := f.Discovery().V1().EndpointSlices()
	changed := make(chan struct{}, 1)
	notify := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { signal(changed) },
		UpdateFunc: func(any, any) { signal(changed) },
		DeleteFunc: func(any) { signal(changed) },
	}
	for _, inf := range []cache.SharedIndexInformer{svcs.Informer(), epSlices.Informer()} {
		if _, err := inf.AddEventHandler(notify); err != nil {
			cancel()
			return err
		}
	}
	f.Start(ctx.Done())
	done := make(chan struct{})
	l.onClose(func() {
		cancel()
		f.Shutdown()
		<-done
	})
	if !cache.WaitForCacheSync(ctx.Done(), svcs.Informer().HasSynced, epSlices.Informer().HasSynced) {
		return fmt.Errorf("kube-proxy stand-in: caches did not sync")
	}
	go func() {
		defer close(done)
		last := ""
		for {
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
			time.Sleep(20 * time.Millisecond) // let a burst settle
			script, err := proxyTable(svcs.Lister().List, epSlices.Lister().List)
			if err != nil || script == last {
				continue
			}
			for _, n := range l.Nodes {
				if err := n.Nft(script); err != nil {
					l.logf("kube-proxy stand-in on %s: %v", n.Name, err)
				}
			}
			last = script
		}
	}()
	signal(changed)
	return nil
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// proxyTable is the nft script of the table for the current Services and EndpointSlices.
func proxyTable(listServices func(labels.Selector) ([]*corev1.Service, error),
	listSlices func(labels.Selector) ([]*discoveryv1.EndpointSlice, error)) (string, error) {
	services, err := listServices(labels.Everything())
	if err != nil {
		return "", err
	}
	eps, err := listSlices(labels.Everything())
	if err != nil {
		return "", err
	}
	slices.SortFunc(services, func(a, b *corev1.Service) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	var rules, chains []string
	n := 0
	for _, svc := range services {
		// Cluster IPs, external IPs and load-balancer ingress IPs: kube-proxy DNATs them all.
		vips := slices.Concat(svc.Spec.ClusterIPs, svc.Spec.ExternalIPs)
		if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
			for _, ing := range svc.Status.LoadBalancer.Ingress {
				if ing.IPMode == nil || *ing.IPMode == corev1.LoadBalancerIPModeVIP { // Proxy: the load balancer is reached
					vips = append(vips, ing.IP)
				}
			}
		}
		for _, cip := range vips {
			ip, err := netip.ParseAddr(cip)
			if err != nil {
				continue
			}
			fam, addrType := "ip", discoveryv1.AddressTypeIPv4
			if ip.Is6() {
				fam, addrType = "ip6", discoveryv1.AddressTypeIPv6
			}
			for _, sp := range svc.Spec.Ports {
				proto := strings.ToLower(string(sp.Protocol))
				var backends []string
				for _, s := range eps {
					if s.Namespace != svc.Namespace || s.Labels[discoveryv1.LabelServiceName] != svc.Name || s.AddressType != addrType {
						continue
					}
					for _, p := range s.Ports {
						if p.Port == nil || (p.Name != nil && *p.Name != sp.Name) {
							continue
						}
						for _, e := range s.Endpoints {
							if e.Conditions.Ready != nil && !*e.Conditions.Ready {
								continue
							}
							for _, a := range e.Addresses {
								backends = append(backends, netip.AddrPortFrom(netip.MustParseAddr(a), uint16(*p.Port)).String())
							}
						}
					}
				}
				if len(backends) == 0 {
					continue
				}
				slices.Sort(backends)
				svcChain := fmt.Sprintf("svc%d", n)
				n++
				rules = append(rules, fmt.Sprintf("%s daddr %s meta l4proto %s th dport %d jump %s", fam, ip, proto, sp.Port, svcChain))
				var vmap []string
				for i, b := range backends {
					ep := fmt.Sprintf("%s_%d", svcChain, i)
					vmap = append(vmap, fmt.Sprintf("%d : jump %s", i, ep))
					chains = append(chains, fmt.Sprintf("chain %s {\n\t\tmeta l4proto %s dnat %s to %s\n\t}", ep, proto, fam, b))
				}
				chains = append(chains, fmt.Sprintf("chain %s {\n\t\tnumgen random mod %d vmap { %s }\n\t}", svcChain, len(backends), strings.Join(vmap, ", ")))
			}
		}
	}
	return fmt.Sprintf(`table inet labproxy
delete table inet labproxy
table inet labproxy {
	chain prerouting {
		type nat hook prerouting priority -101; policy accept;
		jump services
	}
	chain output {
		type nat hook output priority -101; policy accept;
		jump services
	}
	chain services {
		%s
	}
	%s
}
`, strings.Join(rules, "\n\t\t"), strings.Join(chains, "\n\t")), nil
}
