package nft

import (
	"encoding/binary"

	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
)

// UseCompatQueue makes the tables written from now on queue DNS answers with the xtables
// NFQUEUE target (nft_compat), for kernels without nft's queue expression: the kernel queues
// the packet the same way (nft lists it as iptables translates it, queue num <n> bypass);
// restore puts the queue expression back.
func UseCompatQueue() (restore func()) {
	old := queueVerdict
	queueVerdict = func(num uint16) expr.Any {
		// struct xt_NFQ_info_v3: queuenum, queues_total, flags (NFQ_FLAG_BYPASS), padded to 8.
		info := make(xt.Unknown, 8)
		binary.NativeEndian.PutUint16(info[0:], num)
		binary.NativeEndian.PutUint16(info[2:], 1)
		binary.NativeEndian.PutUint16(info[4:], 1)
		return &expr.Target{Name: "NFQUEUE", Rev: 3, Info: &info}
	}
	return func() { queueVerdict = old }
}
