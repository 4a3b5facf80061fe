package api

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/airlockrun/airlock/api/wire"
	"github.com/airlockrun/airlock/internal/api/apiutil"
	"github.com/airlockrun/airlock/internal/controlplane"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/nodecontract"
)

func toTemplate(t controlplane.Template) wire.Template {
	out := wire.Template{Name: t.Name, Ref: t.Ref, Digest: t.Digest, Builtin: t.Builtin, Env: t.Config.Env,
		WorkingDir: t.Config.WorkingDir, User: t.Config.User, Entrypoint: t.Config.Entrypoint, Cmd: t.Config.Cmd, Layers: t.Layers,
		Labels: t.Config.Labels, Runtimes: t.Runtimes}
	if st := t.Start; st != nil {
		out.Start = &wire.TemplateStart{Cmd: st.Cmd, ReadyCmd: st.ReadyCmd, Snapshot: st.Key != ""}
	}
	if !t.CreatedAt.IsZero() {
		c, u := t.CreatedAt, t.UpdatedAt
		out.CreatedAt, out.UpdatedAt = &c, &u
	}
	return out
}

func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request) {
	ts, err := s.cp.ListTemplates(r.Context())
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	out := wire.TemplateList{Templates: make([]wire.Template, 0, len(ts))}
	for _, t := range ts {
		out.Templates = append(out.Templates, toTemplate(t))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request) {
	t, err := s.cp.GetTemplate(r.Context(), r.PathValue("name"))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, toTemplate(t))
}

// importTemplate takes the image archive in the body (operator only).
func (s *Server) importTemplate(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength > nodecontract.MaxImageUpload {
		writeError(w, r, s.log, clientErr(errdefs.ErrTooLarge, "image archive is larger than %d bytes", int64(nodecontract.MaxImageUpload)))
		return
	}
	body := http.MaxBytesReader(w, r.Body, nodecontract.MaxImageUpload)
	t, err := s.cp.ImportTemplate(r.Context(), r.PathValue("name"), body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			err = clientErr(errdefs.ErrTooLarge, "image archive is larger than %d bytes", int64(nodecontract.MaxImageUpload))
		}
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, toTemplate(t))
}

func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	rm, err := s.cp.DeleteTemplate(r.Context(), r.PathValue("name"))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	u := rm.Users
	writeJSON(w, http.StatusOK, wire.TemplateRemoval{Name: rm.Name, Digest: rm.Digest, Users: wire.TemplateUsers{
		Names: u.Names, Sandboxes: u.Sandboxes, Sessions: u.Sessions, SandboxCount: u.SandboxCount, SessionCount: u.SessionCount}})
}

// setTemplateRuntimes sets the runtimes the template's sandboxes may run on (operator only).
func (s *Server) setTemplateRuntimes(w http.ResponseWriter, r *http.Request) {
	var req wire.TemplateRuntimesRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if req.Runtimes == nil {
		writeError(w, r, s.log, clientErr(errdefs.ErrInvalidArgument, "runtimes is required (an empty list allows every runtime)"))
		return
	}
	t, err := s.cp.SetTemplateRuntimes(r.Context(), r.PathValue("name"), req.Runtimes)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, toTemplate(t))
}

// pullTemplate fetches the image the body names from its registry (operator only).
func (s *Server) pullTemplate(w http.ResponseWriter, r *http.Request) {
	var req wire.PullTemplateRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	t, err := s.cp.PullTemplate(r.Context(), tenantOf(r), r.PathValue("name"), controlplane.PullRequest{Image: req.Image,
		Insecure: req.Insecure, Username: req.Username, PasswordSecret: req.PasswordSecret})
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, toTemplate(t))
}

// exportTemplate writes the template's image as an OCI archive (operator only).
func (s *Server) exportTemplate(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	started := false
	err := s.cp.ExportTemplate(r.Context(), name, func() io.Writer {
		started = true
		w.Header().Set("Content-Type", "application/x-tar")
		w.Header().Set("Content-Disposition", `attachment; filename="`+safeFileName(name)+`.tar"`)
		w.WriteHeader(http.StatusOK)
		return w
	})
	if err != nil {
		if !started {
			writeError(w, r, s.log, err)
			return
		}
		s.log.Warn("export template", "template", name, "err", err) // the client sees the archive end short
	}
}

// safeFileName keeps the characters of a template reference that are safe in a file name.
func safeFileName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-' {
			return r
		}
		return '_'
	}, s)
}

// buildTemplate runs a build of the context tar in the body (operator only). Its progress goes out as
// NDJSON lines (wire.BuildLine): events, then the template or the error; an error before the first step
// (a bad request, a Dockerfile that does not parse) is an ordinary error response.
func (s *Server) buildTemplate(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := controlplane.BuildRequest{Dockerfile: q.Get("dockerfile"), Allow: q["allow"], Args: map[string]string{},
		StartCmd: q.Get("start_cmd"), ReadyCmd: q.Get("ready_cmd")}
	for _, a := range q["build_arg"] {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			writeError(w, r, s.log, clientErr(errdefs.ErrInvalidArgument, "build_arg %q: want NAME=VALUE", a))
			return
		}
		req.Args[k] = v
	}
	var err error
	if req.NoCache, err = boolParam(q, "no_cache"); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	for _, p := range []struct {
		name string
		to   *int
	}{{"memory_mb", &req.MemoryMB}, {"disk_mb", &req.DiskMB}} {
		if v := q.Get(p.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				writeError(w, r, s.log, clientErr(errdefs.ErrInvalidArgument, "%s %q: want a non-negative integer", p.name, v))
				return
			}
			*p.to = n
		}
	}
	if r.ContentLength > controlplane.MaxBuildContext {
		writeError(w, r, s.log, clientErr(errdefs.ErrTooLarge, "build context is larger than %d bytes", int64(controlplane.MaxBuildContext)))
		return
	}
	req.Context = http.MaxBytesReader(w, r.Body, controlplane.MaxBuildContext)
	var (
		mu      sync.Mutex
		enc     *json.Encoder
		flusher = http.NewResponseController(w)
	)
	// The first event starts the stream; events come from the build's goroutine and a RUN's output
	// delivery, one at a time.
	req.Progress = func(e controlplane.BuildEvent) {
		mu.Lock()
		defer mu.Unlock()
		if enc == nil {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
			enc = json.NewEncoder(w)
			enc.SetEscapeHTML(false)
		}
		_ = enc.Encode(wire.BuildEvent{Step: e.Step, Steps: e.Steps, Instruction: e.Instruction, Output: e.Output, Cached: e.Cached, Image: e.Image})
		_ = flusher.Flush()
	}
	t, err := s.cp.BuildTemplate(r.Context(), tenantOf(r), r.PathValue("name"), req)
	mu.Lock()
	defer mu.Unlock()
	if enc == nil {
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				err = clientErr(errdefs.ErrTooLarge, "build context is larger than %d bytes", int64(controlplane.MaxBuildContext))
			}
			writeError(w, r, s.log, err)
			return
		}
		writeJSON(w, http.StatusOK, wire.BuildLine{Template: new(toTemplate(t))})
		return
	}
	if err != nil {
		_ = enc.Encode(wire.BuildLine{Error: new(apiutil.ErrorDetail(s.log, r, err))})
		return
	}
	_ = enc.Encode(wire.BuildLine{Template: new(toTemplate(t))})
}
