package cli

import (
	"strings"
	"testing"
)

func TestSandboxMetrics(t *testing.T) {
	f, url := newFakeServer(t)
	code, out, errOut := run(t, url, "", "sandbox", "metrics", sbA, "--since", "2026-01-02T03:00:00Z")
	if code != 0 {
		t.Fatalf("metrics: exit %d, stderr %q", code, errOut)
	}
	if !f.hasBody("GET /v1/sandboxes/" + sbA + "/metrics?start=2026-01-02T03%3A00%3A00Z") {
		t.Errorf("metrics sent another query; saw %v", f.bodies)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "TIME") {
		t.Fatalf("metrics printed %q; want a header and a row", out)
	}
	for _, want := range []string{"37.5% of 2", "96 MiB / 512 MiB", "1.5 MiB", "50 MiB / 1000 MiB"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("row %q lacks %q", lines[1], want)
		}
	}
	se := "se_aaaaaaaaaaaaaaaaaaaaaaaaaa"
	if code, _, errOut := run(t, url, "", "sandbox", "metrics", se); code != 0 || !f.hasBody("GET /v1/sessions/"+se+"/metrics") {
		t.Errorf("metrics of a session: exit %d, stderr %q; saw %v", code, errOut, f.bodies)
	}
	if code, _, errOut := run(t, url, "", "sandbox", "metrics", sbA, "--until", "soon"); code == 0 || !strings.Contains(errOut, "--until") {
		t.Errorf("metrics --until soon: exit %d, stderr %q; want a usage error naming --until", code, errOut)
	}
	if code, out, _ := run(t, url, "", "--json", "sandbox", "metrics", sbA); code != 0 || !strings.Contains(out, `"cpu_used_pct": 37.5`) {
		t.Errorf("metrics --json: exit %d, %q", code, out)
	}
}
