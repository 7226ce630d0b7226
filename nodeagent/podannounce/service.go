package podannounce

import (
	"context"
	"encoding/json"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
)

// The service is small and internal to egressd: its messages travel as JSON (a gRPC codec
// selected by content subtype), on the same server as grpc.health.v1, without generated code.
const (
	serviceName = "egressd.v1.PodAnnouncer"
	method      = "/" + serviceName + "/Announce"
	codecName   = "json"
)

// Request announces one pod of the calling node.
type Request struct {
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Node      string   `json:"node"`
	IPs       []string `json:"ips"`
}

// Reply says whether the receiver SNATs the pod now.
type Reply struct {
	Served bool `json:"served"`
}

type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error)      { return json.Marshal(v) }
func (jsonCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
func (jsonCodec) Name() string                       { return codecName }

func init() { encoding.RegisterCodec(jsonCodec{}) }

// announcer is what the service's handler calls.
type announcer interface {
	announce(ctx context.Context, req *Request) (*Reply, error)
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*announcer)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Announce",
		Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var req Request
			if err := dec(&req); err != nil {
				return nil, err
			}
			return srv.(announcer).announce(ctx, &req)
		},
	}},
	Metadata: "podannounce",
}
