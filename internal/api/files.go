package api

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/airlockrun/airlock/api/wire"
	"github.com/airlockrun/airlock/internal/api/apiutil"
	"github.com/airlockrun/airlock/internal/controlplane"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// target returns the tenant and the sandbox of the request, whose I/O calls go to the control plane.
func target(r *http.Request) (tenant, id string, err error) {
	if id, err = sandboxID(r); err != nil {
		return "", "", err
	}
	return tenantOf(r), id, nil
}

// filePath returns the query parameter name as a path inside the sandbox, checked.
func filePath(r *http.Request, name string) (string, error) {
	p := r.URL.Query().Get(name)
	if p == "" {
		return "", clientErr(errdefs.ErrInvalidArgument, "query parameter %q is required: an absolute path inside the sandbox", name)
	}
	if err := apiutil.CheckPath(p); err != nil {
		return "", err
	}
	return p, nil
}

// onlyQuery rejects query parameters other than the allowed ones.
func onlyQuery(r *http.Request, allowed ...string) error {
	for k := range r.URL.Query() {
		ok := false
		for _, a := range allowed {
			ok = ok || k == a
		}
		if !ok && len(allowed) == 0 {
			return clientErr(errdefs.ErrInvalidArgument, "unknown query parameter %q: this endpoint takes none", truncate(k, 64))
		}
		if !ok {
			return clientErr(errdefs.ErrInvalidArgument, "unknown query parameter %q: want %s", truncate(k, 64), strings.Join(allowed, ", "))
		}
	}
	return nil
}

func toFileInfo(fi controlplane.FileInfo) wire.FileInfo {
	return wire.FileInfo{
		Name: fi.Name, Path: fi.Path, Type: fi.Type, Size: fi.Size,
		Mode: fmt.Sprintf("%04o", fi.Mode), ModTime: fi.ModTime, Target: fi.Target,
	}
}

// fileCall is the shape of every file handler: check the query, resolve the tenant and sandbox, call
// the control plane, answer.
func (s *Server) fileCall(w http.ResponseWriter, r *http.Request, query []string, f func(tenantID, sandboxID string) error) {
	if err := onlyQuery(r, query...); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	tenant, id, err := target(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if err := f(tenant, id); err != nil {
		writeError(w, r, s.log, err)
	}
}

func (s *Server) readFile(w http.ResponseWriter, r *http.Request) {
	s.fileCall(w, r, []string{"path"}, func(tenant, id string) error {
		p, err := filePath(r, "path")
		if err != nil {
			return err
		}
		// The control plane refuses anything but a regular file before the first byte, so that is still
		// an error response.
		return apiutil.Download(w, s.log, "application/octet-stream", p, func(lw io.Writer) error {
			return s.cp.ReadFile(r.Context(), tenant, id, p, lw)
		})
	})
}

func parseMode(r *http.Request) (uint32, error) {
	m := r.URL.Query().Get("mode")
	if m == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(m, 8, 32)
	if err != nil || n > 0o7777 {
		return 0, clientErr(errdefs.ErrInvalidArgument, "mode %q: want octal permission bits such as 0644", truncate(m, 16))
	}
	return uint32(n), nil
}

func (s *Server) writeFile(w http.ResponseWriter, r *http.Request) {
	s.fileCall(w, r, []string{"path", "mode"}, func(tenant, id string) error {
		p, err := filePath(r, "path")
		if err != nil {
			return err
		}
		mode, err := parseMode(r)
		if err != nil {
			return err
		}
		if r.ContentLength > apiutil.MaxUpload {
			return clientErr(errdefs.ErrTooLarge, "file is larger than %d bytes", apiutil.MaxUpload)
		}
		body := http.MaxBytesReader(w, r.Body, apiutil.MaxUpload)
		fi, err := s.cp.WriteFile(r.Context(), tenant, id, p, body, mode)
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return clientErr(errdefs.ErrTooLarge, "file is larger than %d bytes", apiutil.MaxUpload)
			}
			return err
		}
		writeJSON(w, http.StatusOK, toFileInfo(fi))
		return nil
	})
}

func (s *Server) removeFile(w http.ResponseWriter, r *http.Request) {
	s.fileCall(w, r, []string{"path", "recursive"}, func(tenant, id string) error {
		p, err := filePath(r, "path")
		if err != nil {
			return err
		}
		rec := false
		if v := r.URL.Query().Get("recursive"); v != "" {
			if rec, err = strconv.ParseBool(v); err != nil {
				return clientErr(errdefs.ErrInvalidArgument, "recursive must be true or false, not %q", truncate(v, 16))
			}
		}
		if p == "/" {
			return clientErr(errdefs.ErrInvalidArgument, "refusing to remove /")
		}
		if err := s.cp.RemoveFile(r.Context(), tenant, id, p, rec); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

func (s *Server) statFile(w http.ResponseWriter, r *http.Request) {
	s.fileCall(w, r, []string{"path"}, func(tenant, id string) error {
		p, err := filePath(r, "path")
		if err != nil {
			return err
		}
		fi, err := s.cp.StatFile(r.Context(), tenant, id, p)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, toFileInfo(fi))
		return nil
	})
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) {
	s.fileCall(w, r, []string{"path"}, func(tenant, id string) error {
		p, err := filePath(r, "path")
		if err != nil {
			return err
		}
		entries, err := s.cp.ListFiles(r.Context(), tenant, id, p)
		if err != nil {
			return err
		}
		out := wire.FileList{Entries: make([]wire.FileInfo, 0, len(entries))}
		for _, e := range entries {
			out.Entries = append(out.Entries, toFileInfo(e))
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	})
}

func (s *Server) mkdir(w http.ResponseWriter, r *http.Request) {
	s.fileCall(w, r, nil, func(tenant, id string) error {
		var req wire.MkdirRequest
		if err := decodeJSON(w, r, &req); err != nil {
			return err
		}
		if err := apiutil.CheckPath(req.Path); err != nil {
			return err
		}
		fi, err := s.cp.MakeDir(r.Context(), tenant, id, req.Path)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, toFileInfo(fi))
		return nil
	})
}

func (s *Server) move(w http.ResponseWriter, r *http.Request) {
	s.fileCall(w, r, nil, func(tenant, id string) error {
		var req wire.MoveRequest
		if err := decodeJSON(w, r, &req); err != nil {
			return err
		}
		if err := apiutil.CheckPath(req.From); err != nil {
			return err
		}
		if err := apiutil.CheckPath(req.To); err != nil {
			return err
		}
		fi, err := s.cp.MoveFile(r.Context(), tenant, id, req.From, req.To)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, toFileInfo(fi))
		return nil
	})
}

func (s *Server) tarDownload(w http.ResponseWriter, r *http.Request) {
	s.fileCall(w, r, []string{"path"}, func(tenant, id string) error {
		p, err := filePath(r, "path")
		if err != nil {
			return err
		}
		// The control plane stats p before the first byte, so a missing one is still an error response.
		return apiutil.Download(w, s.log, "application/x-tar", p, func(lw io.Writer) error {
			return s.cp.TarDownload(r.Context(), tenant, id, p, lw)
		})
	})
}

func (s *Server) tarUpload(w http.ResponseWriter, r *http.Request) {
	s.fileCall(w, r, []string{"path"}, func(tenant, id string) error {
		p, err := filePath(r, "path")
		if err != nil {
			return err
		}
		if r.ContentLength > apiutil.MaxUpload {
			return clientErr(errdefs.ErrTooLarge, "archive is larger than %d bytes", apiutil.MaxUpload)
		}
		body := http.MaxBytesReader(w, r.Body, apiutil.MaxUpload)
		if err := s.cp.TarUpload(r.Context(), tenant, id, p, body); err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return clientErr(errdefs.ErrTooLarge, "archive is larger than %d bytes", apiutil.MaxUpload)
			}
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}
