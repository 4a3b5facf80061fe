package policy

import (
	"errors"
	"testing"

	"github.com/airlockrun/airlock/internal/errdefs"
)

func TestCredentials(t *testing.T) {
	p := Policy{Credentials: []Credential{
		{Name: "openai", Host: "api.openai.com", Secret: "openai-key", Header: "Authorization", Format: "Bearer {secret}"},
		{Name: "files-only", Host: "*.example.com", Methods: []string{"post"}, PathPrefix: "/v1/files", Secret: "s2", Placeholder: "PLACEHOLDER-123"},
		{Name: "key-header", Host: "keys.example.com", Secret: "s3", Header: "X-Api-Key", Placeholder: "PLACEHOLDER-456"},
		{Name: "basic", Host: "git.example.org", Secret: "s3", BasicAuthUser: "bot"},
	}}
	m, err := Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host, method, path string
		want               []string
	}{
		{"api.openai.com", "GET", "/v1/models", []string{"openai"}},
		{"API.OpenAI.com.", "GET", "/", []string{"openai"}},
		{"a.example.com", "POST", "/v1/files/x", []string{"files-only"}},
		{"a.example.com", "GET", "/v1/files", nil},
		{"a.example.com", "POST", "/v1/filesystem", nil},
		{"a.example.com", "POST", "/v1/../v1/files", nil},
		{"example.com", "POST", "/v1/files", nil},
		{"git.example.org", "GET", "/", []string{"basic"}},
		{"evil.test", "GET", "/", nil},
	} {
		var got []string
		for _, c := range m.Credentials(tc.host, tc.method, tc.path) {
			got = append(got, c.Name)
		}
		if len(got) != len(tc.want) || (len(got) > 0 && got[0] != tc.want[0]) {
			t.Errorf("Credentials(%s %s %s) = %v; want %v", tc.host, tc.method, tc.path, got, tc.want)
		}
	}
	if !m.HasCredentials("a.example.com") || m.HasCredentials("evil.test") {
		t.Errorf("HasCredentials wrong")
	}
	for name, c := range map[string]Credential{
		"no name":               {Host: "a.test", Secret: "s", Header: "X"},
		"no mode":               {Name: "n", Host: "a.test", Secret: "s"},
		"two modes":             {Name: "n", Host: "a.test", Secret: "s", BasicAuthUser: "u", Placeholder: "PLACEHOLDER-1"},
		"placeholder format":    {Name: "n", Host: "a.test", Secret: "s", Header: "X-Key", Format: "Bearer {secret}", Placeholder: "PLACEHOLDER-1"},
		"bad secret":            {Name: "n", Host: "a.test", Secret: "a b", Header: "X"},
		"bad host":              {Name: "n", Host: "a b", Secret: "s", Header: "X"},
		"bad header":            {Name: "n", Host: "a.test", Secret: "s", Header: "X:Y"},
		"format no tag":         {Name: "n", Host: "a.test", Secret: "s", Header: "X", Format: "Bearer"},
		"short holder":          {Name: "n", Host: "a.test", Secret: "s", Placeholder: "x"},
		"basic colon":           {Name: "n", Host: "a.test", Secret: "s", BasicAuthUser: "a:b"},
		"secret and connection": {Name: "n", Host: "a.test", Secret: "s", Connection: "c", Header: "X"},
		"bad connection":        {Name: "n", Host: "a.test", Connection: "a/b"},
		"neither":               {Name: "n", Host: "a.test", Header: "X"},
	} {
		if err := (Policy{Credentials: []Credential{c}}).Validate(); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: Validate = %v; want ErrInvalidArgument", name, err)
		}
	}
}

func TestConnectionCredentialDefaultsToBearer(t *testing.T) {
	m, err := Compile(Policy{Credentials: []Credential{
		{Name: "gh", Host: "api.github.com", Connection: "github"},
		{Name: "custom", Host: "api.example.com", Connection: "corp", Header: "X-Token"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	got := m.Credentials("api.github.com", "GET", "/user")
	if len(got) != 1 || got[0].Connection != "github" || got[0].Header != "Authorization" || got[0].Format != "Bearer {secret}" {
		t.Errorf("connection binding = %+v; want a bearer Authorization header", got)
	}
	got = m.Credentials("api.example.com", "GET", "/")
	if len(got) != 1 || got[0].Header != "X-Token" || got[0].Format != "" {
		t.Errorf("connection binding with a header = %+v; want it kept", got)
	}
}
