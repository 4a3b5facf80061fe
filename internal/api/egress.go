package api

import (
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/airlockrun/airlock/api/wire"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/gateway"
	"github.com/airlockrun/airlock/internal/gateway/flowlog"
)

// maxHostFilter bounds the host filters (a DNS name is at most 253 characters).
const maxHostFilter = 255

// parseEgressQuery reads the query of GET /v1/sandboxes/{id}/egress into a filter. Every parameter is
// optional and may be given once; unknown parameters are refused.
func parseEgressQuery(q url.Values) (flowlog.Filter, error) {
	var f flowlog.Filter
	for k, vs := range q {
		if len(vs) != 1 {
			return f, clientErr(errdefs.ErrInvalidArgument, "query parameter %q is given %d times; give it once", truncate(k, 64), len(vs))
		}
		v := vs[0]
		switch k {
		case "decision":
			if v != gateway.DecisionAllow && v != gateway.DecisionDeny {
				return f, clientErr(errdefs.ErrInvalidArgument, "decision %q: want allow or deny", truncate(v, 32))
			}
			f.Decision = v
		case "host", "host_contains":
			if v == "" || len(v) > maxHostFilter {
				return f, clientErr(errdefs.ErrInvalidArgument, "%s must be 1 to %d bytes", k, maxHostFilter)
			}
			if k == "host" {
				f.Host = v
			} else {
				f.HostContains = v
			}
		case "since", "until":
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return f, clientErr(errdefs.ErrInvalidArgument, "%s %q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", k, truncate(v, 64))
			}
			if k == "since" {
				f.Since = t
			} else {
				f.Until = t
			}
		case "limit":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > flowlog.MaxLimit {
				return f, clientErr(errdefs.ErrInvalidArgument, "limit must be an integer between 1 and %d", flowlog.MaxLimit)
			}
			f.Limit = n
		default:
			return f, clientErr(errdefs.ErrInvalidArgument, "unknown query parameter %q: want decision, host, host_contains, since, until or limit", truncate(k, 64))
		}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return f, clientErr(errdefs.ErrInvalidArgument, "since must be before until")
	}
	return f, nil
}

// toAPIFlow converts a gateway flow to the API's.
func toAPIFlow(f gateway.Flow) wire.Flow {
	ip := ""
	if f.DstIP.IsValid() {
		ip = f.DstIP.String()
	}
	return wire.Flow{
		Start: f.Start, End: f.End, DurationMS: f.Duration().Milliseconds(),
		SandboxID: f.SandboxID, TenantID: f.TenantID,
		SrcPort: int(f.SrcPort), DstIP: ip, DstPort: int(f.DstPort), Host: f.Host,
		Protocol: f.Protocol, Decision: f.Decision, Rule: f.Rule, Reason: f.Reason,
		BytesSent: f.BytesSent, BytesReceived: f.BytesReceived,
		Method: f.Method, Path: f.Path, Binding: f.Binding, Error: f.Error,
	}
}

func (s *Server) egress(w http.ResponseWriter, r *http.Request) {
	id, err := sandboxID(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	f, err := parseEgressQuery(r.URL.Query())
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	flows, err := s.cp.Egress(r.Context(), tenantOf(r), id, f)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	out := wire.FlowList{Flows: make([]wire.Flow, 0, len(flows))}
	for _, fl := range flows {
		out.Flows = append(out.Flows, toAPIFlow(fl))
	}
	writeJSON(w, http.StatusOK, out)
}

// metrics serves the instance's Prometheus metrics, without authentication (see package app).
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	if s.metricsHandler == nil {
		writeError(w, r, s.log, clientErr(errdefs.ErrNotFound, "this server serves no metrics"))
		return
	}
	s.metricsHandler.ServeHTTP(w, r)
}
