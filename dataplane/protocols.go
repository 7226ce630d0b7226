package dataplane

import (
	"strconv"
	"strings"
)

// protocols are the IANA numbers of the protocols egressd names, by lower-case name.
var protocols = map[string]uint8{"icmp": 1, "tcp": 6, "udp": 17, "icmp6": 58, "sctp": 132}

// ProtocolNumber is the IANA number of a protocol name, in any case ("TCP", "udp").
func ProtocolNumber(name string) (uint8, bool) {
	n, ok := protocols[strings.ToLower(name)]
	return n, ok
}

// ProtocolName is the lower-case name of an IANA protocol number, or its number.
func ProtocolName(n uint8) string {
	for name, v := range protocols {
		if v == n {
			return name
		}
	}
	return strconv.Itoa(int(n))
}
