package cli

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// auditServer serves GET /v1/audit from body, honouring after_seq only by counting lines (the
// entries here are numbered from 1).
func auditServer(t *testing.T, body string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/audit" {
			http.NotFound(w, r)
			return
		}
		after, _ := strconv.Atoi(r.URL.Query().Get("after_seq"))
		lines := strings.SplitAfter(body, "\n")
		if after > len(lines) {
			after = len(lines)
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		_, _ = w.Write([]byte(strings.Join(lines[after:], "")))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func runCLI(t *testing.T, url string, args ...string) (int, string, string) {
	t.Helper()
	// Long enough for any of these; a following export that would retry for ever ends with it.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	code := Run(ctx, append([]string{"--url", url, "--api-key", "k"}, args...), Streams{In: strings.NewReader(""), Out: &out, Err: &errb})
	return code, out.String(), errb.String()
}

// TestAuditExportStdout: without --to, --follow or --state, export copies the server's answer to
// stdout as it always did, byte for byte, whatever it holds.
func TestAuditExportStdout(t *testing.T) {
	body := "not even JSON\n{\"seq\": 2}\nno newline at the end"
	code, out, errs := runCLI(t, auditServer(t, body), "audit", "export")
	if code != 0 || out != body {
		t.Errorf("export = %d %q (stderr %q); want the body as it is", code, out, errs)
	}
}

// TestAuditExportFlags: bad flags and destinations are refused before anything is fetched or
// written, with an error naming the flag.
func TestAuditExportFlags(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a.jsonl")
	t.Setenv("AWS_ENDPOINT_URL", "")
	t.Setenv("AWS_ENDPOINT_URL_S3", "")
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{args: []string{"--after", "-1"}, want: "--after -1"},
		{args: []string{"--to", "s3://Bad_Bucket/x"}, want: `--to "s3://Bad_Bucket/x"`},
		{args: []string{"--to", "syslog+udp://127.0.0.1"}, want: `--to "syslog+udp://127.0.0.1"`},
		{args: []string{"--to", "ftp://example.com/x"}, want: "unknown scheme"},
		{args: []string{"--to", file, "--syslog-ca", "ca.pem"}, want: "--syslog-ca is only for a syslog+tls://"},
		{args: []string{"--to", "syslog+tcp://127.0.0.1:601", "--syslog-ca", "ca.pem"}, want: "--syslog-ca is only for a syslog+tls://"},
		{args: []string{"--to", "syslog+tls://127.0.0.1:6514", "--syslog-ca", filepath.Join(dir, "missing.pem")}, want: "--syslog-ca"},
		{args: []string{"--to", file, "--s3-endpoint", "http://127.0.0.1:9000"}, want: "--s3-endpoint is only for an s3://"},
		{args: []string{"--to", file, "--s3-path-style"}, want: "--s3-path-style is only for an s3://"},
		{args: []string{"--to", "s3://b-1/x", "--s3-endpoint", "ftp://127.0.0.1"}, want: "--s3-endpoint: s3 endpoint"},
		{args: []string{"--to", "s3://b-1/x"}, env: map[string]string{"AWS_ENDPOINT_URL": "http://h/path"}, want: "AWS_ENDPOINT_URL: s3 endpoint"},
		{args: []string{"--to", file, "--state", file}, want: "--state"},
	} {
		for k, v := range c.env {
			t.Setenv(k, v)
		}
		code, out, errs := runCLI(t, "http://127.0.0.1:1", append([]string{"audit", "export"}, c.args...)...)
		if code != 1 || out != "" || !strings.Contains(errs, c.want) {
			t.Errorf("export %v = %d %q %q; want 1 and an error with %q", c.args, code, out, errs, c.want)
		}
		for k := range c.env {
			t.Setenv(k, "")
		}
	}
	if _, err := os.Stat(file); err == nil {
		t.Error("a refused export created its file")
	}
	// A CA file with no certificate in it.
	bad := filepath.Join(dir, "bad.pem")
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runCLI(t, "http://127.0.0.1:1", "audit", "export", "--to", "syslog+tls://127.0.0.1:6514", "--syslog-ca", bad); code != 1 || !strings.Contains(errs, "no PEM certificate") {
		t.Errorf("--syslog-ca of no certificate = %d %q", code, errs)
	}
}

// TestAuditExportRefusedKey: an API refusal (here 401) ends even a following export at once, with
// the API's error: retrying does not mend it.
func TestAuditExportRefusedKey(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, http.StatusUnauthorized, "unauthenticated", "unknown API key")
	}))
	defer srv.Close()
	file := filepath.Join(t.TempDir(), "a.jsonl")
	code, _, errs := runCLI(t, srv.URL, "audit", "export", "--to", file, "--follow")
	if code != 1 || !strings.Contains(errs, "unknown API key") {
		t.Errorf("follow with a refused key = %d %q; want 1 and the API's error", code, errs)
	}
}
