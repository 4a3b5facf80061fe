package api

import (
	"errors"
	"net/http"

	"github.com/airlockrun/airlock/internal/controlplane"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/node"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

func toTemplate(t controlplane.Template) airlock.Template {
	out := airlock.Template{Name: t.Name, Ref: t.Ref, Digest: t.Digest, Builtin: t.Builtin, Env: t.Config.Env,
		WorkingDir: t.Config.WorkingDir, User: t.Config.User, Entrypoint: t.Config.Entrypoint, Cmd: t.Config.Cmd, Layers: t.Layers}
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
	out := airlock.TemplateList{Templates: make([]airlock.Template, 0, len(ts))}
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
	if r.ContentLength > node.MaxImageUpload {
		writeError(w, r, s.log, clientErr(errdefs.ErrTooLarge, "image archive is larger than %d bytes", int64(node.MaxImageUpload)))
		return
	}
	body := http.MaxBytesReader(w, r.Body, node.MaxImageUpload)
	t, err := s.cp.ImportTemplate(r.Context(), r.PathValue("name"), body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			err = clientErr(errdefs.ErrTooLarge, "image archive is larger than %d bytes", int64(node.MaxImageUpload))
		}
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, toTemplate(t))
}

func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	if err := s.cp.DeleteTemplate(r.Context(), r.PathValue("name")); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// pullTemplate fetches the image the body names from its registry (operator only).
func (s *Server) pullTemplate(w http.ResponseWriter, r *http.Request) {
	var req airlock.PullTemplateRequest
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
