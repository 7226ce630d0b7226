package cluster

import (
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPrimaryIfAddrRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    PrimaryIfAddr
		format  string
		wantErr string
	}{
		{in: `{"ipv4":"10.0.0.2/24","ipv6":"fd00::2/64"}`,
			want:   PrimaryIfAddr{V4: netip.MustParsePrefix("10.0.0.2/24"), V6: netip.MustParsePrefix("fd00::2/64")},
			format: `{"ipv4":"10.0.0.2/24","ipv6":"fd00::2/64"}`},
		{in: `{"ipv4":"10.0.0.2/24"}`, want: PrimaryIfAddr{V4: netip.MustParsePrefix("10.0.0.2/24")}, format: `{"ipv4":"10.0.0.2/24"}`},
		{in: `{"ipv6":"fd00::2/64"}`, want: PrimaryIfAddr{V6: netip.MustParsePrefix("fd00::2/64")}, format: `{"ipv6":"fd00::2/64"}`},
		{in: `{}`, wantErr: "does not have any IP information set"},
		{in: `{"ipv4":"10.0.0.2"}`, wantErr: "no '/'"},
		{in: `{"ipv4":"fd00::2/64"}`, wantErr: "not an address of its family"},
		{in: `not json`, wantErr: "failed to unmarshal"},
	} {
		got, err := ParsePrimaryIfAddr(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParsePrimaryIfAddr(%s) error = %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParsePrimaryIfAddr(%s) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		if f := got.Format(); f != tc.format {
			t.Errorf("Format() = %s, want %s", f, tc.format)
		}
	}
}

func TestProbeTarget(t *testing.T) {
	for _, tc := range []struct {
		annotations map[string]string
		want        string // "" is none
	}{
		{map[string]string{PrimaryIfAddrAnnotation: `{"ipv4":"10.0.0.2/24","ipv6":"fd00::2/64"}`}, "10.0.0.2:9107"},
		{map[string]string{PrimaryIfAddrAnnotation: `{"ipv6":"fd00::2/64"}`}, "[fd00::2]:9107"},
		{map[string]string{PrimaryIfAddrAnnotation: `{}`}, ""},
		{map[string]string{"other": "x"}, ""},
		{nil, ""},
	} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: tc.annotations}}
		got, ok := ProbeTarget(n, 9107)
		if s := map[bool]string{true: got.String()}[ok]; s != tc.want {
			t.Errorf("ProbeTarget(%v) = %q, want %q", tc.annotations, s, tc.want)
		}
	}
}
