// The TencentCloud VPC SDK that flannel's tencent-vpc backend imports is not served by this
// machine's module proxy. This stand-in has the names that backend uses and fails every call:
// the lab runs flannel's vxlan backend, and tencent-vpc is never selected.
module github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/vpc

go 1.26.0
