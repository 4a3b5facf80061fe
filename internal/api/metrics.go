package api

import (
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/airlockrun/airlock/api/wire"
	"github.com/airlockrun/airlock/internal/controlplane"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/nodecontract"
)

// Resource metrics of sandboxes and sessions, on /v1 and on E2B's API (see controlplane/metrics.go).

// maxUnixSeconds is the last second of year 9999, the latest time a window may name.
const maxUnixSeconds = 253402300799

// parseMetricsTime reads a bound of a metrics window: unix seconds or an RFC 3339 time. An end given in
// seconds covers that whole second (E2B's SDKs round the present to seconds, down as often as up).
func parseMetricsTime(name, v string, end bool) (time.Time, error) {
	if v != "" && strings.Trim(v, "0123456789") == "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n > maxUnixSeconds {
			return time.Time{}, clientErr(errdefs.ErrInvalidArgument, "%s %q: unix seconds must be at most %d", name, truncate(v, 32), int64(maxUnixSeconds))
		}
		t := time.Unix(n, 0).UTC()
		if end {
			t = t.Add(time.Second - 1)
		}
		return t, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, clientErr(errdefs.ErrInvalidArgument, "%s %q: want unix seconds or an RFC 3339 time such as 2026-01-02T15:04:05Z", name, truncate(v, 64))
	}
	return t, nil
}

// parseMetricsWindow reads start and end, each optional and given at most once; strict refuses every
// other parameter. start after end is an invalid argument.
func parseMetricsWindow(q url.Values, strict bool) (start, end time.Time, err error) {
	for k, vs := range q {
		switch k {
		case "start", "end":
		default:
			if strict {
				return start, end, clientErr(errdefs.ErrInvalidArgument, "unknown query parameter %q: want start or end", truncate(k, 64))
			}
			continue
		}
		if len(vs) != 1 {
			return start, end, clientErr(errdefs.ErrInvalidArgument, "query parameter %q is given %d times; give it once", k, len(vs))
		}
		t, err := parseMetricsTime(k, vs[0], k == "end")
		if err != nil {
			return start, end, err
		}
		if k == "start" {
			start = t
		} else {
			end = t
		}
	}
	if !start.IsZero() && !end.IsZero() && start.After(end) {
		return start, end, clientErr(errdefs.ErrInvalidArgument, "start %s is after end %s", start.Format(time.RFC3339), end.Format(time.RFC3339))
	}
	return start, end, nil
}

// toAPIMetrics converts a node's readings to the API's.
func toAPIMetrics(ss []nodecontract.Sample) []wire.Metric {
	out := make([]wire.Metric, 0, len(ss))
	for _, s := range ss {
		out = append(out, wire.Metric{Time: s.Time.UTC(), CPUCount: s.CPUCount, CPUUsedPct: s.CPUUsedPct,
			MemoryUsedBytes: s.MemUsed, MemoryCacheBytes: s.MemCache, MemoryTotalBytes: s.MemTotal,
			DiskUsedBytes: s.DiskUsed, DiskTotalBytes: s.DiskTotal})
	}
	return out
}

func (s *Server) sandboxMetrics(w http.ResponseWriter, r *http.Request) {
	id, err := sandboxID(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	start, end, err := parseMetricsWindow(r.URL.Query(), true)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	ss, err := s.cp.SandboxMetrics(r.Context(), tenantOf(r), id, start, end)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.MetricList{SandboxID: id, Metrics: toAPIMetrics(ss)})
}

func (s *Server) sessionMetrics(w http.ResponseWriter, r *http.Request) {
	id, err := sessionID(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	start, end, err := parseMetricsWindow(r.URL.Query(), true)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	sb, ss, err := s.cp.SessionMetrics(r.Context(), tenantOf(r), id, start, end)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.MetricList{SandboxID: sb, Metrics: toAPIMetrics(ss)})
}

// e2bMetric is E2B's SandboxMetric.
type e2bMetric struct {
	Timestamp     string  `json:"timestamp"`
	TimestampUnix int64   `json:"timestampUnix"`
	CPUCount      int     `json:"cpuCount"`
	CPUUsedPct    float64 `json:"cpuUsedPct"`
	MemUsed       int64   `json:"memUsed"`
	MemTotal      int64   `json:"memTotal"`
	MemCache      int64   `json:"memCache"`
	DiskUsed      int64   `json:"diskUsed"`
	DiskTotal     int64   `json:"diskTotal"`
}

// e2bTimeFormat is RFC 3339 in milliseconds, which every SDK's date parser reads.
const e2bTimeFormat = "2006-01-02T15:04:05.000Z07:00"

func toE2BMetric(s nodecontract.Sample) e2bMetric {
	pct := s.CPUUsedPct
	if math.IsNaN(pct) || math.IsInf(pct, 0) {
		pct = 0
	}
	return e2bMetric{Timestamp: s.Time.UTC().Format(e2bTimeFormat), TimestampUnix: s.Time.Unix(), CPUCount: s.CPUCount,
		CPUUsedPct: pct, MemUsed: s.MemUsed, MemTotal: s.MemTotal, MemCache: s.MemCache, DiskUsed: s.DiskUsed, DiskTotal: s.DiskTotal}
}

// e2bSandboxMetrics is GET /sandboxes/{id}/metrics: the sandbox's readings in [start, end] (unix
// seconds), oldest first; none while it is paused.
func (s *Server) e2bSandboxMetrics(w http.ResponseWriter, r *http.Request) {
	se, err := s.e2bSession(r)
	if err != nil {
		s.e2bError(w, r, err)
		return
	}
	start, end, err := parseMetricsWindow(r.URL.Query(), false)
	if err != nil {
		s.e2bError(w, r, err)
		return
	}
	_, ss, err := s.cp.SessionMetrics(r.Context(), tenantOf(r), se.ID, start, end)
	if err != nil {
		s.e2bError(w, r, err)
		return
	}
	out := make([]e2bMetric, 0, len(ss))
	for _, m := range ss {
		out = append(out, toE2BMetric(m))
	}
	writeJSON(w, http.StatusOK, out)
}

// e2bSandboxesMetrics is GET /sandboxes/metrics?sandbox_ids=a,b: a reading taken now of each of the
// sandboxes named that runs, by ID (the paused, unknown and other tenants' are left out).
func (s *Server) e2bSandboxesMetrics(w http.ResponseWriter, r *http.Request) {
	vs := r.URL.Query()["sandbox_ids"]
	var ids []string
	for _, v := range vs {
		for _, id := range strings.Split(v, ",") {
			if id = strings.TrimSpace(id); id != "" {
				ids = append(ids, id)
			}
			if len(ids) > controlplane.MaxMetricsIDs {
				s.e2bError(w, r, clientErr(errdefs.ErrInvalidArgument, "sandbox_ids: at most %d sandbox IDs", controlplane.MaxMetricsIDs))
				return
			}
		}
	}
	if len(ids) == 0 {
		s.e2bError(w, r, clientErr(errdefs.ErrInvalidArgument, "sandbox_ids is required: sandbox IDs separated by commas"))
		return
	}
	// IDs that cannot be a session's are nobody's: left out like unknown ones.
	valid := ids[:0]
	for _, id := range ids {
		if sessionIDPattern.MatchString(id) {
			valid = append(valid, id)
		}
	}
	latest, err := s.cp.LatestSessionMetrics(r.Context(), tenantOf(r), valid)
	if err != nil {
		s.e2bError(w, r, err)
		return
	}
	out := struct {
		Sandboxes map[string]e2bMetric `json:"sandboxes"`
	}{Sandboxes: make(map[string]e2bMetric, len(latest))}
	for id, m := range latest {
		out.Sandboxes[id] = toE2BMetric(m)
	}
	writeJSON(w, http.StatusOK, out)
}
