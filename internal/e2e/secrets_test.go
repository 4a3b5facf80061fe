package e2e

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// TestSecretsAreWriteOnly: secrets can be created, described, updated and deleted; their values never
// come back through the API and are nowhere on disk in plain text.
func TestSecretsAreWriteOnly(t *testing.T) {
	e := testenv.Start(t, testenv.Options{})
	ctx := ctxT(t, time.Minute)
	c := e.Client
	const v1, v2 = "sk-test-value-one-9f8e7d6c", "sk-test-value-two-1a2b3c4d"

	s, err := c.CreateSecret(ctx, "openai.key", v1)
	if err != nil || s.Name != "openai.key" || s.Version != 1 {
		t.Fatalf("CreateSecret = %+v, %v", s, err)
	}
	if _, err := c.CreateSecret(ctx, "openai.key", v1); !errors.Is(err, airlock.ErrAlreadyExists) {
		t.Errorf("second create = %v; want ErrAlreadyExists", err)
	}
	if s, err = c.UpdateSecret(ctx, "openai.key", v2); err != nil || s.Version != 2 {
		t.Fatalf("UpdateSecret = %+v, %v", s, err)
	}
	if got, err := c.GetSecret(ctx, "openai.key"); err != nil || got.Version != 2 {
		t.Errorf("GetSecret = %+v, %v", got, err)
	}
	if l, err := c.ListSecrets(ctx); err != nil || len(l.Secrets) != 1 {
		t.Errorf("ListSecrets = %+v, %v", l, err)
	}
	// No response carries a value.
	for _, path := range []string{"/v1/secrets", "/v1/secrets/openai.key"} {
		req, _ := http.NewRequest("GET", e.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+e.APIKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), "sk-test") || strings.Contains(string(b), `"value"`) {
			t.Errorf("GET %s returned a value: %s", path, b)
		}
	}
	// Bad input.
	for _, tc := range []struct {
		method, path, body string
		want               int
	}{
		{"POST", "/v1/secrets", `{"name":"bad name","value":"x"}`, 400},
		{"POST", "/v1/secrets", `{"name":"","value":"x"}`, 400},
		{"POST", "/v1/secrets", `{"name":"ok","value":""}`, 400},
		{"POST", "/v1/secrets", `{"name":"ok","value":"x","extra":1}`, 400},
		{"POST", "/v1/secrets", `{"name":"big","value":"` + strings.Repeat("a", 70<<10) + `"}`, 413},
		{"PUT", "/v1/secrets/..%2fx", `{"value":"x"}`, 400},
		{"PUT", "/v1/secrets/missing", `{"value":"x"}`, 404},
		{"GET", "/v1/secrets/missing", ``, 404},
		{"DELETE", "/v1/secrets/missing", ``, 404},
		{"GET", "/v1/secrets?all=1", ``, 400},
	} {
		req, _ := http.NewRequest(tc.method, e.URL+tc.path, strings.NewReader(tc.body))
		req.Header.Set("Authorization", "Bearer "+e.APIKey)
		if tc.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var eb airlock.ErrorBody
		if resp.StatusCode != tc.want || json.Unmarshal(b, &eb) != nil || eb.Error.Message == "" {
			t.Errorf("%s %s: %d %s; want %d with an error message", tc.method, truncate(tc.path), resp.StatusCode, truncate(string(b)), tc.want)
		}
	}
	// Nothing on disk holds either value in plain text.
	assertNotInDir(t, e.DataDir, v1, v2)
	if err := c.DeleteSecret(ctx, "openai.key"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSecret(ctx, "openai.key"); !errors.Is(err, airlock.ErrNotFound) {
		t.Errorf("GetSecret after delete = %v; want ErrNotFound", err)
	}
}
