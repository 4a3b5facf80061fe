package cli

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/sdk/go/airlock"
)

func TestParseAllow(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want airlock.NetworkRule
		bad  bool
	}{
		{in: "api.openai.com:443", want: airlock.NetworkRule{Action: "allow", Host: "api.openai.com", Ports: []airlock.PortRange{"443"}}},
		{in: "*.pypi.org", want: airlock.NetworkRule{Action: "allow", Host: "*.pypi.org"}},
		{in: "example.com:80,443,8000-8100", want: airlock.NetworkRule{Action: "allow", Host: "example.com", Ports: []airlock.PortRange{"80", "443", "8000-8100"}}},
		{in: "203.0.113.0/24:5432", want: airlock.NetworkRule{Action: "allow", CIDRs: []string{"203.0.113.0/24"}, Ports: []airlock.PortRange{"5432"}}},
		{in: "203.0.113.7/32", want: airlock.NetworkRule{Action: "allow", CIDRs: []string{"203.0.113.7/32"}}},
		{in: ":443", bad: true},
	} {
		got, err := parseAllow(tc.in)
		if (err != nil) != tc.bad {
			t.Errorf("parseAllow(%q) error = %v; want error %v", tc.in, err, tc.bad)
			continue
		}
		if !tc.bad {
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("parseAllow(%q) (-want +got):\n%s", tc.in, diff)
			}
		}
	}
}
