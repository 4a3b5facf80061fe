package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/errdefs"
)

func TestValidate(t *testing.T) {
	manyRules := make([]Rule, MaxRules+1)
	for i := range manyRules {
		manyRules[i] = Rule{Action: "allow", Host: "example.com"}
	}
	okRules := manyRules[:MaxRules]
	tests := []struct {
		name    string
		p       Policy
		wantErr string // substring; "" means valid
	}{
		{"zero", Policy{}, ""},
		{"default allow", Policy{Default: "allow"}, ""},
		{"default deny", Policy{Default: "deny"}, ""},
		{"bad default", Policy{Default: "Allow"}, `default "Allow"`},
		{"max rules", Policy{Rules: okRules}, ""},
		{"too many rules", Policy{Rules: manyRules}, "257 rules: at most 256"},
		{"full rule", Policy{Rules: []Rule{{
			Name: "openai", Action: "allow", Host: "API.OpenAI.com.", Ports: []PortRange{Port(443), {8000, 8100}},
			CIDRs: []string{"203.0.113.7/32", "fd00::/8"}, Methods: []string{"GET", "POST"}, PathPrefix: "/v1/models",
		}}}, ""},
		{"wildcard", Policy{Rules: []Rule{{Action: "deny", Host: "*.example.com"}}}, ""},
		{"cidr only", Policy{Rules: []Rule{{Action: "allow", CIDRs: []string{"10.0.0.0/8"}}}}, ""},
		{"bad action", Policy{Rules: []Rule{{Action: "permit", Host: "a.com"}}}, `rules[0] ("rule[0]"): action "permit"`},
		{"empty action", Policy{Rules: []Rule{{Host: "a.com"}}}, `action ""`},
		{"neither host nor cidrs", Policy{Rules: []Rule{{Action: "allow", Ports: []PortRange{Port(443)}}}}, "neither host nor cidrs"},
		{"host with port", Policy{Rules: []Rule{{Action: "allow", Host: "a.com:443"}}}, `host "a.com:443"`},
		{"host star alone", Policy{Rules: []Rule{{Action: "allow", Host: "*"}}}, `host "*"`},
		{"host inner star", Policy{Rules: []Rule{{Action: "allow", Host: "a.*.com"}}}, `host "a.*.com"`},
		{"host double star", Policy{Rules: []Rule{{Action: "allow", Host: "*.*.com"}}}, `host "*.*.com"`},
		{"host star no dot", Policy{Rules: []Rule{{Action: "allow", Host: "*example.com"}}}, `host "*example.com"`},
		{"host empty label", Policy{Rules: []Rule{{Action: "allow", Host: "a..com"}}}, `host "a..com"`},
		{"host two trailing dots", Policy{Rules: []Rule{{Action: "allow", Host: "a.com.."}}}, `host "a.com.."`},
		{"host underscore", Policy{Rules: []Rule{{Action: "allow", Host: "a_b.com"}}}, `host "a_b.com"`},
		{"host unicode", Policy{Rules: []Rule{{Action: "allow", Host: "bücher.de"}}}, `host "bücher.de"`},
		{"host punycode", Policy{Rules: []Rule{{Action: "allow", Host: "xn--bcher-kva.de"}}}, ""},
		{"host ipv4", Policy{Rules: []Rule{{Action: "allow", Host: "10.0.0.1"}}}, `host "10.0.0.1"`},
		{"host ipv6", Policy{Rules: []Rule{{Action: "allow", Host: "::1"}}}, `host "::1"`},
		{"host leading hyphen", Policy{Rules: []Rule{{Action: "allow", Host: "-a.com"}}}, `host "-a.com"`},
		{"host long label", Policy{Rules: []Rule{{Action: "allow", Host: strings.Repeat("a", 64) + ".com"}}}, "host"},
		{"host 63 label", Policy{Rules: []Rule{{Action: "allow", Host: strings.Repeat("a", 63) + ".com"}}}, ""},
		{"bad cidr", Policy{Rules: []Rule{{Action: "allow", CIDRs: []string{"10.0.0.0/33"}}}}, `cidr "10.0.0.0/33"`},
		{"bare address", Policy{Rules: []Rule{{Action: "allow", CIDRs: []string{"10.0.0.1"}}}}, `cidr "10.0.0.1"`},
		{"cidr zone", Policy{Rules: []Rule{{Action: "allow", CIDRs: []string{"fe80::1%eth0/128"}}}}, `cidr "fe80::1%eth0/128"`},
		{"port zero", Policy{Rules: []Rule{{Action: "allow", Host: "a.com", Ports: []PortRange{Port(0)}}}}, "port 0: out of range"},
		{"port high", Policy{Rules: []Rule{{Action: "allow", Host: "a.com", Ports: []PortRange{Port(65536)}}}}, "port 65536: out of range"},
		{"port range reversed", Policy{Rules: []Rule{{Action: "allow", Host: "a.com", Ports: []PortRange{{9, 8}}}}}, "port range 9-8: first port above last"},
		{"methods need host", Policy{Rules: []Rule{{Action: "allow", CIDRs: []string{"10.0.0.0/8"}, Methods: []string{"GET"}}}}, "methods and path_prefix need a host"},
		{"path needs host", Policy{Rules: []Rule{{Action: "allow", CIDRs: []string{"10.0.0.0/8"}, PathPrefix: "/"}}}, "methods and path_prefix need a host"},
		{"lowercase method", Policy{Rules: []Rule{{Action: "allow", Host: "a.com", Methods: []string{"get"}}}}, `method "get"`},
		{"method not token", Policy{Rules: []Rule{{Action: "allow", Host: "a.com", Methods: []string{"GET /"}}}}, `method "GET /"`},
		{"empty method", Policy{Rules: []Rule{{Action: "allow", Host: "a.com", Methods: []string{""}}}}, `method ""`},
		{"custom method", Policy{Rules: []Rule{{Action: "allow", Host: "a.com", Methods: []string{"PROPFIND", "M-SEARCH"}}}}, ""},
		{"path no slash", Policy{Rules: []Rule{{Action: "allow", Host: "a.com", PathPrefix: "v1"}}}, `path_prefix "v1": must start with "/"`},
		{"path dotdot", Policy{Rules: []Rule{{Action: "allow", Host: "a.com", PathPrefix: "/v1/../x"}}}, "not canonical"},
		{"path percent", Policy{Rules: []Rule{{Action: "allow", Host: "a.com", PathPrefix: "/v1/%61"}}}, "not canonical"},
		{"path query", Policy{Rules: []Rule{{Action: "allow", Host: "a.com", PathPrefix: "/v1?x"}}}, "not canonical"},
		{"path double slash", Policy{Rules: []Rule{{Action: "allow", Host: "a.com", PathPrefix: "/v1//x"}}}, "not canonical"},
		{"path trailing slash", Policy{Rules: []Rule{{Action: "allow", Host: "a.com", PathPrefix: "/v1/"}}}, ""},
		{"duplicate names", Policy{Rules: []Rule{{Name: "x", Action: "allow", Host: "a.com"}, {Name: "x", Action: "deny", Host: "b.com"}}}, `rules[1] ("x"): name already used by rules[0]`},
		{"name clashes with generated", Policy{Rules: []Rule{{Name: "rule[1]", Action: "allow", Host: "a.com"}, {Action: "deny", Host: "b.com"}}}, `rules[1] ("rule[1]"): name already used`},
		{"name default", Policy{Rules: []Rule{{Name: "default", Action: "allow", Host: "a.com"}}}, "reserved"},
		{"name guard", Policy{Rules: []Rule{{Name: "guard:private", Action: "allow", Host: "a.com"}}}, "reserved"},
		{"name control", Policy{Rules: []Rule{{Name: "a\nb", Action: "allow", Host: "a.com"}}}, "control byte"},
		{"too many cidrs", Policy{Rules: []Rule{{Action: "allow", CIDRs: strings.Split(strings.Repeat("10.0.0.0/8,", MaxRuleItems+1), ",")[:MaxRuleItems+1]}}}, "65 cidrs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v; want nil", err)
				}
				if _, err := Compile(tt.p); err != nil {
					t.Fatalf("Compile() = %v; want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil; want error containing %q", tt.wantErr)
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("Validate() = %v; want ErrInvalidArgument", err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Validate() = %q; want it to contain %q", err, tt.wantErr)
			}
			if _, cerr := Compile(tt.p); cerr == nil || cerr.Error() != err.Error() {
				t.Errorf("Compile() error = %v; want %v", cerr, err)
			}
		})
	}
}

func TestPolicyJSON(t *testing.T) {
	p := Policy{Default: "deny", Rules: []Rule{
		{Name: "models", Action: "allow", Host: "api.example.com", Ports: []PortRange{Port(443), {8000, 8100}},
			Methods: []string{"GET"}, PathPrefix: "/v1/models"},
		{Action: "allow", CIDRs: []string{"203.0.113.7/32"}},
	}}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"default":"deny","rules":[{"name":"models","action":"allow","host":"api.example.com","ports":[443,"8000-8100"],"methods":["GET"],"path_prefix":"/v1/models"},{"action":"allow","cidrs":["203.0.113.7/32"]}]}`
	if string(b) != want {
		t.Errorf("Marshal = %s; want %s", b, want)
	}
	var got Policy
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(p, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestPortRangeJSON(t *testing.T) {
	tests := []struct {
		in      string
		want    PortRange
		wantErr bool
	}{
		{`443`, Port(443), false},
		{`"443"`, Port(443), false},
		{`"8000-8100"`, PortRange{8000, 8100}, false},
		{` 22 `, Port(22), false},
		{`-1`, Port(-1), false}, // syntactically fine; Validate rejects it
		{`70000`, Port(70000), false},
		{`"1-"`, PortRange{}, true},
		{`"a"`, PortRange{}, true},
		{`4.5`, PortRange{}, true},
		{`1e3`, PortRange{}, true},
		{`null`, PortRange{}, true},
		{`true`, PortRange{}, true},
		{`{"first":1}`, PortRange{}, true},
		{`"1-2-3"`, PortRange{}, true},
		{`99999999999999999999`, PortRange{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			var got PortRange
			err := json.Unmarshal([]byte(tt.in), &got)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("Unmarshal(%s) = %v, nil; want error", tt.in, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Unmarshal(%s): %v", tt.in, err)
			}
			if got != tt.want {
				t.Errorf("Unmarshal(%s) = %v; want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestNormalizeHost(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"Example.COM", "example.com", true},
		{"example.com.", "example.com", true},
		{"example.com..", "", false},
		{".", "", false},
		{"", "", false},
		{"localhost", "localhost", true},
		{"a-b.c", "a-b.c", true},
		{"a-.c", "", false},
		{"1.2.3.4", "", false},
		{"1.2.3.com", "1.2.3.com", true},
		{"123", "", false},
		{"[::1]", "", false},
		{"a.com:443", "", false},
		{"a b.com", "", false},
		{"a\x00.com", "", false},
		{strings.Repeat("a.", 126) + "a", strings.Repeat("a.", 126) + "a", true}, // 253 bytes
		{strings.Repeat("a.", 127) + "a", "", false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.in), func(t *testing.T) {
			got, ok := NormalizeHost(tt.in)
			if got != tt.want || ok != tt.ok {
				t.Errorf("NormalizeHost(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
			}
		})
	}
}
