package router

import (
	"encoding/binary"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The router's table, written whole in one transaction (an earlier one is replaced):
//
//	table inet egressd_router {
//	  chain prerouting { type nat hook prerouting priority dstnat
//	    iifname <primary> meta nfproto ipv4 <proto> dport <port> dnat ip to <dst>:<targetPort>   # per rule
//	    iifname <primary> meta nfproto ipv4 meta l4proto {tcp,udp,sctp} dnat ip to <fallback>   # with a fallback
//	    iifname <primary> icmp type echo-request dnat ip to <fallback>
//	  }
//	  chain postrouting { type nat hook postrouting priority srcnat
//	    oifname net1 meta nfproto ipv4 snat ip to <first IPv4 address>
//	  }
//	  chain input { type filter hook input priority filter
//	    iifname <primary> meta nfproto ipv4 ct state new meta l4proto tcp reject with tcp reset   # without a fallback
//	    iifname <primary> meta nfproto ipv4 ct state new meta l4proto {udp,sctp} reject
//	  }
//	}
//
// and the same for IPv6. What a rule or the fallback DNATs is forwarded and never reaches
// input, so input sees exactly what neither redirected. Only TCP, UDP, SCTP and echo requests
// go to the fallback: neighbour discovery and other ICMP stay with the pod.

func writeTable(c *Config, primary string) error {
	conn, err := nftables.New()
	if err != nil {
		return err
	}
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: tableName}
	conn.AddTable(t)
	conn.DelTable(t)
	conn.AddTable(t)
	accept := nftables.ChainPolicyAccept
	pre := conn.AddChain(&nftables.Chain{Name: "prerouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest, Policy: &accept})
	post := conn.AddChain(&nftables.Chain{Name: "postrouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource, Policy: &accept})
	in := conn.AddChain(&nftables.Chain{Name: "input", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	add := func(ch *nftables.Chain, e ...[]expr.Any) {
		var all []expr.Any
		for _, x := range e {
			all = append(all, x...)
		}
		conn.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: all})
	}
	fromCluster := ifname(expr.MetaKeyIIFNAME, primary)
	for _, v4 := range []bool{true, false} {
		src, ok := c.source(v4)
		if !ok {
			continue
		}
		for _, r := range c.Rules {
			if r.Destination.Addr().Is4() != v4 {
				continue
			}
			add(pre, fromCluster, nfproto(v4), l4proto(r.Protocol), dport(r.Port), dnat(r.Destination.Addr(), r.Destination.Port()))
		}
		if c.Fallback.IsValid() && c.Fallback.Is4() == v4 {
			for _, p := range []uint8{TCP, UDP, SCTP} {
				add(pre, fromCluster, nfproto(v4), l4proto(p), dnat(c.Fallback, 0))
			}
			add(pre, fromCluster, nfproto(v4), echoRequest(v4), dnat(c.Fallback, 0))
		} else {
			add(in, fromCluster, nfproto(v4), ctNew(), l4proto(TCP), []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_TCP_RST}})
			for _, p := range []uint8{UDP, SCTP} {
				add(in, fromCluster, nfproto(v4), ctNew(), l4proto(p),
					[]expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_PORT_UNREACH}})
			}
		}
		add(post, ifname(expr.MetaKeyOIFNAME, Interface), nfproto(v4),
			[]expr.Any{&expr.Immediate{Register: 1, Data: src.AsSlice()}, &expr.NAT{Type: expr.NATTypeSourceNAT, Family: natFamily(v4), RegAddrMin: 1}})
	}
	return conn.Flush()
}

func ifname(key expr.MetaKey, name string) []expr.Any {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return []expr.Any{&expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b}}
}

func natFamily(v4 bool) uint32 {
	if v4 {
		return unix.NFPROTO_IPV4
	}
	return unix.NFPROTO_IPV6
}

func nfproto(v4 bool) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{byte(natFamily(v4))}}}
}

func l4proto(p uint8) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}}}
}

func dport(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.BigEndian.AppendUint16(nil, port)},
	}
}

func echoRequest(v4 bool) []expr.Any {
	proto, typ := uint8(unix.IPPROTO_ICMPV6), byte(128)
	if v4 {
		proto, typ = unix.IPPROTO_ICMP, 8
	}
	return append(l4proto(proto),
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{typ}})
}

// ctNew matches the first packet of a connection (ct state new).
func ctNew() []expr.Any {
	const stateNew = 8 // NF_CT_STATE_BIT(IP_CT_NEW)
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(stateNew), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
	}
}

// dnat rewrites the destination to dst, and its port unless port is 0 (kept).
func dnat(dst netip.Addr, port uint16) []expr.Any {
	e := []expr.Any{&expr.Immediate{Register: 1, Data: dst.AsSlice()}}
	nat := &expr.NAT{Type: expr.NATTypeDestNAT, Family: natFamily(dst.Is4()), RegAddrMin: 1}
	if port != 0 {
		e = append(e, &expr.Immediate{Register: 2, Data: binary.BigEndian.AppendUint16(nil, port)})
		nat.RegProtoMin, nat.Specified = 2, true
	}
	return append(e, nat)
}
