package api

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/airlockrun/airlock/api/wire"
	"github.com/airlockrun/airlock/internal/controlplane"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

// AuditLog is where the server records API calls: audit.Recorder.
type AuditLog interface {
	Record(store.AuditEntry)
	Flush(ctx context.Context) error
}

// SetAudit makes the server record every authenticated call into its tenant's audit log.
func (s *Server) SetAudit(a AuditLog) { s.audit = a }

// statusWriter remembers the status a handler wrote. It passes Hijack and Flush through (WebSockets).
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (Hijack, Flush, deadlines).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush sends what was written so far, for handlers that assert http.Flusher (Connect's streams).
func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// audited serves h and records the call (who, what, on what, with which status) in the tenant's
// audit log. r carries the principal.
func (s *Server) audited(w http.ResponseWriter, r *http.Request, h http.HandlerFunc) {
	if s.audit == nil {
		h(w, r)
		return
	}
	p := principalOf(r)
	target := r.PathValue("id") // before a session's work route replaces it with the sandbox
	for _, k := range []string{"name", "snapshot", "pid", "port"} {
		if v := r.PathValue(k); v != "" {
			if target != "" {
				target += "/"
			}
			target += v
		}
	}
	sw := &statusWriter{ResponseWriter: w}
	h(sw, r)
	status := sw.status
	if status == 0 {
		status = http.StatusOK
	}
	if status == http.StatusOK && (r.Header.Get("Upgrade") != "") {
		status = http.StatusSwitchingProtocols // hijacked
	}
	actor := p.KeyID
	if p.Token != nil {
		actor = p.Token.ID
	}
	d := map[string]string{"remote": r.RemoteAddr}
	if v := r.URL.Query().Get("path"); v != "" {
		d["path"] = truncate(v, 512)
	}
	detail, _ := json.Marshal(d)
	action := r.Pattern // "METHOD /path/{id}", as the route was registered
	if !strings.HasPrefix(action, r.Method+" ") {
		action = r.Method + " " + action
	}
	s.audit.Record(store.AuditEntry{TenantID: p.TenantID, Kind: store.AuditAPI, Actor: actor, Action: action,
		Target: target, Result: strconv.Itoa(status), Detail: string(detail)})
}

// exportAudit streams the tenant's audit log as JSON lines.
func (s *Server) exportAudit(w http.ResponseWriter, r *http.Request) {
	if err := onlyQuery(r, "after_seq"); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	var after int64
	if v := r.URL.Query().Get("after_seq"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			writeError(w, r, s.log, clientErr(errdefs.ErrInvalidArgument, "after_seq must be a non-negative integer"))
			return
		}
		after = n
	}
	if s.audit != nil {
		if err := s.audit.Flush(r.Context()); err != nil {
			writeError(w, r, s.log, err)
			return
		}
	}
	tenant := tenantOf(r)
	first, err := s.cp.ListAudit(r.Context(), tenant, after, store.MaxListLimit)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	page := first
	for {
		for _, e := range page {
			_ = enc.Encode(wire.AuditEntry{Tenant: e.TenantID, Seq: e.Seq, Time: e.Time, Kind: e.Kind, Actor: e.Actor, Action: e.Action,
				Target: e.Target, Result: e.Result, Detail: e.Detail, Sealed: e.Sealed, Salt: e.Salt, Prev: e.Prev, Hash: e.Hash})
			after = e.Seq
		}
		if len(page) < store.MaxListLimit {
			break
		}
		if page, err = s.cp.ListAudit(r.Context(), tenant, after, store.MaxListLimit); err != nil {
			s.log.Warn("export audit", "tenant", tenant, "err", err)
			// The answer is cut off as an error (no clean end), never as a shorter log that verifies.
			_ = bw.Flush()
			panic(http.ErrAbortHandler)
		}
	}
	_ = bw.Flush()
}

func (s *Server) getLogRetention(w http.ResponseWriter, r *http.Request) {
	own, eff, floor, err := s.cp.LogRetention(r.Context(), tenantOf(r))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, logRetention(own, eff, floor))
}

func (s *Server) setLogRetention(w http.ResponseWriter, r *http.Request) {
	var req wire.LogRetention
	if _, err := readJSON(w, r, &req); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if req.Seconds < 0 || req.Seconds > int64(controlplane.MaxLogRetention/time.Second) {
		writeError(w, r, s.log, clientErr(errdefs.ErrInvalidArgument, "seconds must be between 0 (the server's default) and %d", int64(controlplane.MaxLogRetention/time.Second)))
		return
	}
	own, eff, floor, err := s.cp.SetLogRetention(r.Context(), tenantOf(r), time.Duration(req.Seconds)*time.Second)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, logRetention(own, eff, floor))
}

func logRetention(own, eff, floor time.Duration) wire.LogRetention {
	return wire.LogRetention{Seconds: int64(own / time.Second), EffectiveSeconds: int64(eff / time.Second), MinSeconds: int64(floor / time.Second)}
}
