package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// TestMetrics: a real gVisor sandbox's resource use through /v1 and E2B's API. A busy loop shows as CPU
// use, a process holding 128 MiB as memory used, a 50 MB file as disk used; the totals are the limits; a
// session's metrics are its sandbox's, none while it is paused; another tenant finds none of them (404
// on /v1 and on /e2b, left out of E2B's batch); bad windows are 400s in each API's shape.
func TestMetrics(t *testing.T) {
	e := testenv.Start(t, testenv.Options{})
	ctx := ctxT(t, 5*time.Minute)
	c := e.Client
	sb := create(t, e, airlock.CreateSandboxRequest{CPU: 1000, MemoryMB: 512, DiskMB: 256})

	latest := func(what string) airlock.Metric {
		t.Helper()
		l, err := c.SandboxMetrics(ctx, sb.ID, airlock.MetricsOptions{})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if l.SandboxID != sb.ID || len(l.Metrics) == 0 {
			t.Fatalf("%s: %+v; want at least the reading taken now", what, l)
		}
		return l.Metrics[len(l.Metrics)-1]
	}
	base := latest("a new sandbox")
	t.Logf("a new sandbox: %+v", base)
	if base.CPUCount != 1 || base.MemoryTotalBytes != 512<<20 || base.DiskTotalBytes > 256<<20 || base.DiskTotalBytes < 230<<20 {
		t.Errorf("totals %+v; want 1 CPU, 512 MiB of memory and a little under 256 MiB of disk", base)
	}
	if base.MemoryUsedBytes <= 0 || base.MemoryUsedBytes > base.MemoryTotalBytes || base.DiskUsedBytes < 0 || base.DiskUsedBytes > base.DiskTotalBytes {
		t.Errorf("readings out of range: %+v", base)
	}
	if since := time.Since(base.Time); since < -time.Second || since > 10*time.Second {
		t.Errorf("the latest reading is from %v; want now", base.Time)
	}

	// Three seconds of a busy core: the readings over it show CPU use. A 3 s burn spans at most two of
	// the node's 5 s intervals (the one it falls in most is at least 30% busy), and the reading taken now
	// covers at least its last second. Once the node stored a reading since (within 5 s), the window
	// holds it and the one taken now.
	before := time.Now()
	sh(t, e, sb.ID, `sh -c 'timeout 3 sh -c "while :; do :; done"'; true`)
	var l *airlock.MetricList
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		var err error
		if l, err = c.SandboxMetrics(ctx, sb.ID, airlock.MetricsOptions{Start: before}); err != nil {
			t.Fatal(err)
		}
		if len(l.Metrics) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reading stored in 15 s since the burn began: %+v", l)
		}
	}
	busiest := 0.0
	for _, m := range l.Metrics {
		busiest = max(busiest, m.CPUUsedPct)
		if m.CPUUsedPct < 0 || m.CPUUsedPct > 100 {
			t.Errorf("CPU use %v%%; want 0 to 100", m.CPUUsedPct)
		}
	}
	t.Logf("CPU use after a 3 s busy loop: %d readings, the busiest %.1f%%", len(l.Metrics), busiest)
	if busiest < 20 {
		t.Errorf("the busiest reading over a 3 s busy loop: %.1f%%; want more than 20%%", busiest)
	}

	// A process that holds 128 MiB, and 50 MB written to the disk.
	sh(t, e, sb.ID, `(setsid nohup python3 -c "
import time
b = bytearray(128 << 20)
b[::4096] = b'x' * len(b[::4096])
open('/tmp/held', 'w').close()
time.sleep(600)
" >/dev/null 2>&1 &)
while [ ! -e /tmp/held ]; do sleep 0.05; done
dd if=/dev/urandom of=/home/user/big bs=1M count=50 conv=fsync 2>/dev/null`)
	after := latest("after the memory and the file")
	t.Logf("after: %+v", after)
	if got := after.MemoryUsedBytes - base.MemoryUsedBytes; got < 110<<20 {
		t.Errorf("memory used grew by %d MiB while a process held 128 MiB", got>>20)
	}
	if got := after.DiskUsedBytes - base.DiskUsedBytes; got < 46<<20 || got > 64<<20 {
		t.Errorf("disk used grew by %d MiB after 50 MB were written", got>>20)
	}
	if after.MemoryTotalBytes != base.MemoryTotalBytes || after.DiskTotalBytes != base.DiskTotalBytes || after.CPUCount != 1 {
		t.Errorf("the totals moved: %+v, then %+v", base, after)
	}

	// A window in the past holds the node's stored readings only; a bad one is a 400.
	past, err := c.SandboxMetrics(ctx, sb.ID, airlock.MetricsOptions{Start: before.Add(-time.Hour), End: time.Now().Add(-time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range past.Metrics {
		if m.Time.After(time.Now().Add(-time.Second)) {
			t.Errorf("a reading at %v in a window that ended a second ago", m.Time)
		}
	}
	status, body := call(t, ctx, "GET", e.URL+"/v1/sandboxes/"+sb.ID+"/metrics?start=yesterday", e.APIKey, "", false)
	if status != http.StatusBadRequest || !strings.Contains(body, `"invalid_argument"`) || !strings.Contains(body, "start") {
		t.Errorf("a bad start on /v1: %d %s; want a 400 naming start", status, body)
	}

	// An access token of the sandbox with scope exec reads them; a ports-only one does not, nor another
	// sandbox's.
	tok, err := c.CreateAccessToken(ctx, airlock.CreateAccessTokenRequest{SandboxID: sb.ID, Scopes: []string{"exec"}})
	if err != nil {
		t.Fatal(err)
	}
	if status, body := call(t, ctx, "GET", e.URL+"/v1/sandboxes/"+sb.ID+"/metrics", tok.Token, "", false); status != http.StatusOK || !strings.Contains(body, `"cpu_used_pct"`) {
		t.Errorf("the sandbox's token: %d %s; want its metrics", status, body)
	}
	ports, err := c.CreateAccessToken(ctx, airlock.CreateAccessTokenRequest{SandboxID: sb.ID, Scopes: []string{"ports"}})
	if err != nil {
		t.Fatal(err)
	}
	if status, body := call(t, ctx, "GET", e.URL+"/v1/sandboxes/"+sb.ID+"/metrics", ports.Token, "", false); status != http.StatusForbidden {
		t.Errorf("a ports-only token: %d %s; want 403", status, body)
	}

	// A session's metrics are its sandbox's; a paused one has none.
	se, err := c.CreateSession(ctx, airlock.CreateSessionRequest{CPU: 2000})
	if err != nil {
		t.Fatal(err)
	}
	sl, err := c.SessionMetrics(ctx, se.ID, airlock.MetricsOptions{})
	if err != nil || sl.SandboxID == "" || sl.SandboxID != se.SandboxID || len(sl.Metrics) == 0 || sl.Metrics[0].CPUCount != 2 {
		t.Fatalf("a session's metrics: %+v, %v; want readings of its sandbox %s, 2 CPUs", sl, err, se.SandboxID)
	}
	if status, _ := call(t, ctx, "GET", e.URL+"/v1/sessions/"+se.ID+"/metrics", tok.Token, "", false); status != http.StatusNotFound {
		t.Errorf("another sandbox's token on the session's metrics: %d; want 404", status)
	}

	// E2B's API: the session is the E2B sandbox.
	var em []map[string]any
	status, body = call(t, ctx, "GET", e.URL+"/e2b/sandboxes/"+se.ID+"/metrics", e.APIKey, "", false)
	if status != http.StatusOK || json.Unmarshal([]byte(body), &em) != nil || len(em) == 0 {
		t.Fatalf("E2B's metrics: %d %s; want a list of readings", status, body)
	}
	for _, k := range []string{"timestamp", "timestampUnix", "cpuCount", "cpuUsedPct", "memUsed", "memTotal", "memCache", "diskUsed", "diskTotal"} {
		if _, ok := em[0][k]; !ok {
			t.Errorf("E2B's metric lacks %s: %v", k, em[0])
		}
	}
	if em[0]["cpuCount"] != float64(2) || em[0]["memTotal"] != float64(512<<20) {
		t.Errorf("E2B's metric: %v; want 2 CPUs and 512 MiB", em[0])
	}
	for _, q := range []string{"start=yesterday", "start=2000&end=1000"} {
		status, body := call(t, ctx, "GET", e.URL+"/e2b/sandboxes/"+se.ID+"/metrics?"+q, e.APIKey, "", false)
		var eb struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		if status != http.StatusBadRequest || json.Unmarshal([]byte(body), &eb) != nil || eb.Code != 400 || eb.Message == "" {
			t.Errorf("E2B's metrics ?%s: %d %s; want E2B's 400 body", q, status, body)
		}
	}
	var batch struct {
		Sandboxes map[string]map[string]any `json:"sandboxes"`
	}
	status, body = call(t, ctx, "GET", e.URL+"/e2b/sandboxes/metrics?sandbox_ids="+se.ID+",se_aaaaaaaaaaaaaaaaaaaaaaaaaa,"+sb.ID, e.APIKey, "", false)
	if status != http.StatusOK || json.Unmarshal([]byte(body), &batch) != nil || len(batch.Sandboxes) != 1 || batch.Sandboxes[se.ID] == nil {
		t.Errorf("E2B's batch: %d %s; want the running session only", status, body)
	}
	many := strings.Repeat(se.ID+",", 101)
	if status, body := call(t, ctx, "GET", e.URL+"/e2b/sandboxes/metrics?sandbox_ids="+many, e.APIKey, "", false); status != http.StatusBadRequest || !strings.Contains(body, `"code":400`) {
		t.Errorf("E2B's batch of 101: %d %s; want 400", status, body)
	}

	// Another tenant finds none of it.
	other, err := c.CreateTenant(ctx, "metrics-other")
	if err != nil {
		t.Fatal(err)
	}
	oc := airlock.New(e.URL, airlock.WithAPIKey(other.APIKey.Key))
	if _, err := oc.SandboxMetrics(ctx, sb.ID, airlock.MetricsOptions{}); !isStatus(err, http.StatusNotFound) {
		t.Errorf("another tenant's SandboxMetrics: %v; want 404", err)
	}
	if _, err := oc.SessionMetrics(ctx, se.ID, airlock.MetricsOptions{}); !isStatus(err, http.StatusNotFound) {
		t.Errorf("another tenant's SessionMetrics: %v; want 404", err)
	}
	status, body = call(t, ctx, "GET", e.URL+"/e2b/sandboxes/"+se.ID+"/metrics", other.APIKey.Key, "", false)
	if status != http.StatusNotFound || !strings.Contains(body, `"code":404`) {
		t.Errorf("another tenant on E2B's metrics: %d %s; want E2B's 404", status, body)
	}
	status, body = call(t, ctx, "GET", e.URL+"/e2b/sandboxes/metrics?sandbox_ids="+se.ID, other.APIKey.Key, "", false)
	if status != http.StatusOK || strings.Contains(body, se.ID) {
		t.Errorf("another tenant's batch: %d %s; want nothing of the session", status, body)
	}

	if _, err := c.PauseSession(ctx, se.ID); err != nil {
		t.Fatal(err)
	}
	if sl, err := c.SessionMetrics(ctx, se.ID, airlock.MetricsOptions{}); err != nil || sl.SandboxID != "" || sl.Metrics == nil || len(sl.Metrics) != 0 {
		t.Errorf("a paused session's metrics: %+v, %v; want none", sl, err)
	}
	if got, err := c.GetSession(ctx, se.ID); err != nil || got.State != "paused" {
		t.Errorf("the paused session after its metrics: %+v, %v; want it still paused", got, err)
	}
	if status, body := call(t, ctx, "GET", e.URL+"/e2b/sandboxes/"+se.ID+"/metrics", e.APIKey, "", false); status != http.StatusOK || strings.TrimSpace(body) != "[]" {
		t.Errorf("E2B's metrics of a paused sandbox: %d %s; want []", status, body)
	}
}
