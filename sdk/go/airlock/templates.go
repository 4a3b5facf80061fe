package airlock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
)

// ListTemplates lists the templates sandboxes can boot.
func (c *Client) ListTemplates(ctx context.Context) (*TemplateList, error) {
	return callJSON[TemplateList](ctx, c, http.MethodGet, "/v1/templates", nil, nil, "list templates")
}

// GetTemplate returns the template called name.
func (c *Client) GetTemplate(ctx context.Context, name string) (*Template, error) {
	return callJSON[Template](ctx, c, http.MethodGet, "/v1/templates/"+url.PathEscape(name), nil, nil, "get template %s", name)
}

// ImportTemplate imports the OCI image in archive (an OCI archive, a tar of an OCI image layout, or a
// `docker save` tarball) and points name at it: a new template, or a new version of one (sandboxes and
// sessions of the old version keep it). Operator only.
func (c *Client) ImportTemplate(ctx context.Context, name string, archive io.Reader) (*Template, error) {
	resp, err := c.do(ctx, request{method: http.MethodPut, path: "/v1/templates/" + url.PathEscape(name), body: archive,
		contentType: "application/x-tar"})
	if err != nil {
		return nil, fmt.Errorf("import template %s: %w", name, err)
	}
	defer resp.Body.Close()
	var out Template
	if err := c.decodeJSON(resp.Body, &out); err != nil {
		return nil, fmt.Errorf("import template %s: %w", name, err)
	}
	return &out, nil
}

// PullTemplate fetches an image from a registry and points name at it, as ImportTemplate does.
// Operator only.
func (c *Client) PullTemplate(ctx context.Context, name string, req PullTemplateRequest) (*Template, error) {
	return callJSON[Template](ctx, c, http.MethodPost, "/v1/templates/"+url.PathEscape(name)+"/pull", nil, req, "pull template %s", name)
}

// DeleteTemplate removes the name; sandboxes, sessions and snapshots that recorded its image keep it,
// and the answer says which. Operator only.
func (c *Client) DeleteTemplate(ctx context.Context, name string) (TemplateRemoval, error) {
	var out TemplateRemoval
	if err := c.doJSON(ctx, http.MethodDelete, "/v1/templates/"+url.PathEscape(name), nil, nil, &out, nil); err != nil {
		return TemplateRemoval{}, fmt.Errorf("delete template %s: %w", name, err)
	}
	return out, nil
}

// SetTemplateRuntimes sets the runtimes the sandboxes of template name may run on (operator only).
func (c *Client) SetTemplateRuntimes(ctx context.Context, name string, runtimes []string) (Template, error) {
	if runtimes == nil {
		runtimes = []string{}
	}
	var out Template
	if err := c.doJSON(ctx, http.MethodPut, "/v1/templates/"+url.PathEscape(name)+"/runtimes", nil, TemplateRuntimesRequest{Runtimes: runtimes}, &out, nil); err != nil {
		return Template{}, fmt.Errorf("set runtimes of template %s: %w", name, err)
	}
	return out, nil
}

// BuildTemplateOptions are a build's options besides its context.
type BuildTemplateOptions struct {
	// Dockerfile is the Dockerfile's path in the context ("" : "Dockerfile").
	Dockerfile string
	// Args are build arguments (Dockerfile ARG), by name.
	Args map[string]string
	// Allow lists the hosts (names, or *.domain) RUN steps may reach; nothing else is reachable.
	Allow []string
	// NoCache runs every step anew.
	NoCache bool
	// MemoryMB and DiskMB size the sandboxes RUN steps run in (0: the server's defaults).
	MemoryMB, DiskMB int
	// StartCmd and ReadyCmd (shell command lines) give the template a start command and its ready
	// check ("": the image's labels run.airlock.start-cmd and run.airlock.ready-cmd, if any). The build
	// boots the image once with it, waits until the check passes and keeps a start snapshot: every
	// sandbox of the template starts with the command running.
	StartCmd, ReadyCmd string
	// Progress, if set, receives each event of the build as it comes.
	Progress func(BuildEvent)
}

// BuildTemplate builds the Dockerfile in the build context buildContext (a tar) and points name at the
// image, as ImportTemplate does: each RUN in a sandbox of the image so far with opts.Allow as its
// egress, every step cached. Operator only.
func (c *Client) BuildTemplate(ctx context.Context, name string, buildContext io.Reader, opts BuildTemplateOptions) (*Template, error) {
	q := url.Values{}
	if opts.Dockerfile != "" {
		q.Set("dockerfile", opts.Dockerfile)
	}
	for k, v := range opts.Args {
		q.Add("build_arg", k+"="+v)
	}
	for _, h := range opts.Allow {
		q.Add("allow", h)
	}
	if opts.NoCache {
		q.Set("no_cache", "true")
	}
	if opts.MemoryMB > 0 {
		q.Set("memory_mb", strconv.Itoa(opts.MemoryMB))
	}
	if opts.DiskMB > 0 {
		q.Set("disk_mb", strconv.Itoa(opts.DiskMB))
	}
	if opts.StartCmd != "" {
		q.Set("start_cmd", opts.StartCmd)
	}
	if opts.ReadyCmd != "" {
		q.Set("ready_cmd", opts.ReadyCmd)
	}
	resp, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/templates/" + url.PathEscape(name) + "/build", query: q,
		body: buildContext, contentType: "application/x-tar"})
	if err != nil {
		return nil, fmt.Errorf("build template %s: %w", name, err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var l BuildLine
		if err := dec.Decode(&l); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("build template %s: the server's answer ended early: %w", name, err)
		}
		switch {
		case l.Error != nil:
			return nil, fmt.Errorf("build template %s: %w", name, errorFromDetail(*l.Error))
		case l.Template != nil:
			return l.Template, nil
		case opts.Progress != nil:
			opts.Progress(l.BuildEvent)
		}
	}
}

// ExportTemplate writes the image of template name (or NAME@sha256:…) to w as an OCI archive, which
// ImportTemplate (and other OCI tools) take back as the same image. Operator only.
func (c *Client) ExportTemplate(ctx context.Context, name string, w io.Writer) error {
	resp, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/templates/" + url.PathEscape(name) + "/export"})
	if err != nil {
		return fmt.Errorf("export template %s: %w", name, err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("export template %s: %w", name, err)
	}
	return nil
}
