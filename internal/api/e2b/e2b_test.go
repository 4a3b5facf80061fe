package e2b

import (
	"errors"
	"net/url"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/gateway/policy"
	"github.com/airlockrun/airlock/internal/store"
)

func TestE2BPolicy(t *testing.T) {
	off, on := false, true
	host := "h.example.com"
	tests := []struct {
		name  string
		allow *bool
		n     *e2bNetwork
		want  policy.Policy
		err   bool
	}{
		{name: "default: the internet", want: policy.Policy{Default: "allow"}},
		{name: "switched on", allow: &on, want: policy.Policy{Default: "allow"}},
		{name: "switched off", allow: &off, want: policy.Policy{Default: "deny"}},
		{name: "allow list over deny all", n: &e2bNetwork{AllowOut: []string{"api.example.com", "*.example.org", "1.2.3.4", "10.0.0.0/8", "2001:db8::1"},
			DenyOut: []string{"0.0.0.0/0"}},
			want: policy.Policy{Default: "deny", Rules: []policy.Rule{
				{Action: "allow", Host: "api.example.com"}, {Action: "allow", Host: "*.example.org"},
				{Action: "allow", CIDRs: []string{"1.2.3.4/32"}}, {Action: "allow", CIDRs: []string{"10.0.0.0/8"}},
				{Action: "allow", CIDRs: []string{"2001:db8::1/128"}}}}},
		{name: "deny some", n: &e2bNetwork{DenyOut: []string{"bad.example.com", "8.8.8.8"}},
			want: policy.Policy{Default: "allow", Rules: []policy.Rule{{Action: "deny", Host: "bad.example.com"}, {Action: "deny", CIDRs: []string{"8.8.8.8/32"}}}}},
		{name: "not a CIDR", n: &e2bNetwork{AllowOut: []string{"1.2.3.4/99"}}, err: true},
		{name: "not a host", n: &e2bNetwork{AllowOut: []string{"exa mple"}}, err: true},
		{name: "header rules", n: &e2bNetwork{Rules: []byte(`{"api.example.com":[{"transform":{}}]}`)}, err: true},
		{name: "egress proxy", n: &e2bNetwork{EgressProxy: []byte(`{"address":"p:1080"}`)}, err: true},
		{name: "masked host", n: &e2bNetwork{MaskRequestHost: &host}, err: true},
		{name: "empty extras are fine", n: &e2bNetwork{Rules: []byte(`{}`), HTTPSPorts: []byte(`[]`), EgressProxy: []byte(`null`)}, want: policy.Policy{Default: "allow"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := e2bPolicy(tt.allow, tt.n)
			if tt.err {
				if !errors.Is(err, errdefs.ErrInvalidArgument) || err.Error() == "" {
					t.Fatalf("e2bPolicy = %+v, %v; want an invalid-argument error", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("e2bPolicy (-want +got):\n%s", diff)
			}
		})
	}
}

func TestE2BListFilter(t *testing.T) {
	running := []store.SessionState{store.SessionCreating, store.SessionPausing, store.SessionResuming, store.SessionRunning}
	paused := []store.SessionState{store.SessionFailed, store.SessionPaused}
	both := append(append([]store.SessionState{}, running...), paused...)
	tests := []struct {
		query string
		want  store.SessionFilter
		err   bool
	}{
		{"", store.SessionFilter{Limit: 100, Descending: true}, false},
		{"order=desc", store.SessionFilter{Limit: 100, Descending: true}, false},
		{"order=asc", store.SessionFilter{Limit: 100}, false},
		{"state=running", store.SessionFilter{Limit: 100, Descending: true}, false},
		{"state=paused&limit=5&nextToken=abc", store.SessionFilter{Limit: 5, Cursor: "abc", Descending: true}, false},
		{"state=running,paused", store.SessionFilter{Limit: 100, Descending: true}, false},
		// As the SDK sends {user: "a b", app: "x&y"}: keys and values URI-encoded, then as a form
		// (URLSearchParams), then the whole as one query value.
		{"metadata=" + url.QueryEscape("user="+url.QueryEscape(url.QueryEscape("a b"))+"&app="+url.QueryEscape(url.QueryEscape("x&y"))),
			store.SessionFilter{Limit: 100, Metadata: map[string]string{"user": "a b", "app": "x&y"}, Descending: true}, false},
		{"state=stopped", store.SessionFilter{}, true},
		{"order=newest", store.SessionFilter{}, true},
		{"limit=0", store.SessionFilter{}, true},
		{"limit=101", store.SessionFilter{}, true},
		{"metadata=" + url.QueryEscape("novalue"), store.SessionFilter{}, true},
		{"metadata=" + url.QueryEscape("=v"), store.SessionFilter{}, true},
	}
	for _, tt := range tests {
		q, _ := url.ParseQuery(tt.query)
		got, err := e2bListFilter(q)
		if tt.err {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("e2bListFilter(%q) = %v; want invalid argument", tt.query, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("e2bListFilter(%q): %v", tt.query, err)
			continue
		}
		want := tt.want
		switch q.Get("state") {
		case "running":
			want.States = running
		case "paused":
			want.States = paused
		default:
			want.States = both
		}
		sortStates(want.States)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("e2bListFilter(%q) (-want +got):\n%s", tt.query, diff)
		}
	}
}

func sortStates(ss []store.SessionState) {
	for i := range ss {
		for j := i + 1; j < len(ss); j++ {
			if ss[j] < ss[i] {
				ss[i], ss[j] = ss[j], ss[i]
			}
		}
	}
}
