// Package v20170312 stands in for TencentCloud's VPC SDK (see ../go.mod): every call fails.
package v20170312

import "errors"

var errUnavailable = errors.New("the TencentCloud VPC SDK is not built into the egressd lab's flanneld")

type Filter struct {
	Name   *string
	Values []*string
}

type Route struct {
	DestinationCidrBlock *string
	GatewayType          *string
	GatewayId            *string
	RouteId              *uint64
	RouteType            *string
	Enabled              *bool
}

type RouteTable struct {
	RouteTableId *string
	RouteSet     []*Route
}

type DescribeRouteTablesRequest struct{ Filters []*Filter }

type DescribeRouteTablesResponse struct {
	Response *struct{ RouteTableSet []*RouteTable }
}

type DeleteRoutesRequest struct {
	RouteTableId *string
	Routes       []*Route
}

type CreateRoutesRequest struct {
	RouteTableId *string
	Routes       []*Route
}

type Client struct{}

func NewClientWithSecretId(string, string, string) (*Client, error) { return nil, errUnavailable }

func NewDescribeRouteTablesRequest() *DescribeRouteTablesRequest {
	return &DescribeRouteTablesRequest{}
}
func NewDeleteRoutesRequest() *DeleteRoutesRequest { return &DeleteRoutesRequest{} }
func NewCreateRoutesRequest() *CreateRoutesRequest { return &CreateRoutesRequest{} }

func (*Client) DescribeRouteTables(*DescribeRouteTablesRequest) (*DescribeRouteTablesResponse, error) {
	return nil, errUnavailable
}
func (*Client) DeleteRoutes(*DeleteRoutesRequest) (struct{}, error) {
	return struct{}{}, errUnavailable
}
func (*Client) CreateRoutes(*CreateRoutesRequest) (struct{}, error) {
	return struct{}{}, errUnavailable
}
