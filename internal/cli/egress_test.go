package cli

import (
	"strings"
	"testing"
	"time"
)

func TestSandboxEgress(t *testing.T) {
	f, url := newFakeServer(t)
	code, out, errOut := run(t, url, "", "sandbox", "egress", sbA, "--decision", "deny", "--host-contains", "example",
		"--since", "2026-01-02T03:04:05Z", "--limit", "5")
	if code != 0 {
		t.Fatalf("egress: exit %d, stderr %q", code, errOut)
	}
	if !f.hasBody("GET /v1/sandboxes/" + sbA + "/egress?decision=deny&host_contains=example&limit=5&since=2026-01-02T03%3A04%3A05Z") {
		t.Errorf("egress sent another query; saw %v", f.bodies)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ENDED") {
		t.Fatalf("egress printed %q; want a header and two rows", out)
	}
	for _, want := range []string{"allow", "tls", "api.example.com (203.0.113.2:443)", "api", "517", "4096", "1.5s", "2m ago"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("row %q lacks %q", lines[1], want)
		}
	}
	for _, want := range []string{"deny", "http", "POST /v1/files", "default"} {
		if !strings.Contains(lines[2], want) {
			t.Errorf("row %q lacks %q", lines[2], want)
		}
	}
	if code, _, errOut := run(t, url, "", "sandbox", "egress", sbA, "--since", "soon"); code == 0 || !strings.Contains(errOut, "--since") {
		t.Errorf("egress --since soon: exit %d, stderr %q; want a usage error naming --since", code, errOut)
	}
	if code, out, _ := run(t, url, "", "--json", "sandbox", "egress", sbA); code != 0 || !strings.Contains(out, `"bytes_received": 4096`) {
		t.Errorf("egress --json: exit %d, %q", code, out)
	}
}

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"":                     {},
		"10m":                  now.Add(-10 * time.Minute),
		"2026-01-01T00:00:00Z": time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		if got, err := parseSince("--since", in, now); err != nil || !got.Equal(want) {
			t.Errorf("parseSince(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"-5m", "0s", "yesterday"} {
		if _, err := parseSince("--since", in, now); err == nil {
			t.Errorf("parseSince(%q) succeeded; want an error", in)
		}
	}
}
