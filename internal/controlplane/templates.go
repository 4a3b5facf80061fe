package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/template"
	"github.com/airlockrun/airlock/internal/template/oci"
)

// Template names are the control plane's: each is a document (templates/NAME) holding the digest of the
// image it points at, which every replica sees. A sandbox or session records the reference a name
// resolved to when it was created (NAME@sha256:…), so re-pointing or removing the name never changes
// what it, its snapshots, forks and restores boot. The images themselves are on the nodes
// (template.Catalog), by digest.

// Template is a template as the API shows it.
type Template struct {
	// Name is the template's name; Ref what a sandbox created from it now records ("NAME@sha256:…";
	// "default" for the built-in one).
	Name string
	Ref  string
	// Digest is the image's manifest digest; "" for the built-in template.
	Digest string
	// Builtin marks the default template: the platform's image (Digest set), or, where none is
	// installed, the host's /usr under a generated /etc.
	Builtin bool
	// Config is what the image sets for its processes; Layers counts its layers.
	Config oci.Config
	Layers int
	// Start is the template's start command, if it has one (templatestart.go).
	Start *TemplateStart
	// Runtimes are the runtimes its sandboxes may run on, the first their default (SetTemplateRuntimes);
	// nil: every one.
	Runtimes  []string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// templateDoc is what a template's document holds.
type templateDoc struct {
	Digest    string         `json:"digest"`
	Config    oci.Config     `json:"config"`
	Layers    int            `json:"layers"`
	Start     *TemplateStart `json:"start,omitempty"`
	CreatedAt time.Time      `json:"created_at"`
	// Source identifies the file the default template's image was installed from (its size and
	// modification time), so that a start installs it again only once the file changed.
	Source string `json:"source,omitempty"`
}

const templateDocPrefix = "templates/"

// builtinTemplate is the default template where no image of it is installed: the host's /usr (also
// what sandboxes, sessions and snapshots that recorded "default" with no digest boot, for good).
var builtinTemplate = Template{Name: template.DefaultName, Ref: template.DefaultName, Builtin: true}

// ListTemplates returns every template: the built-in one first, then by name.
func (s *placer) ListTemplates(ctx context.Context) ([]Template, error) {
	docs, err := s.store.ListDocs(ctx, templateDocPrefix)
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	out := []Template{builtinTemplate}
	for _, d := range docs {
		t, err := templateOf(d)
		if err != nil {
			s.log.Warn("skip a template record", "key", d.Key, "err", err)
			continue
		}
		if t.Builtin {
			out[0] = t
			continue
		}
		out = append(out, t)
	}
	sort.Slice(out[1:], func(i, j int) bool { return out[1+i].Name < out[1+j].Name })
	for i := range out {
		if out[i].Runtimes, err = s.TemplateRuntimes(ctx, out[i].Name); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// GetTemplate returns the template called name.
func (s *placer) GetTemplate(ctx context.Context, name string) (Template, error) {
	if template.IsDefault(name) {
		name = template.DefaultName
	} else if err := oci.CheckName(name); err != nil {
		return Template{}, err
	}
	d, err := s.store.GetDoc(ctx, templateDocPrefix+name)
	var t Template
	switch {
	case err == nil:
		if t, err = templateOf(d); err != nil {
			return Template{}, err
		}
	case errors.Is(err, errdefs.ErrNotFound) && name == template.DefaultName:
		t = builtinTemplate
	case errors.Is(err, errdefs.ErrNotFound):
		return Template{}, fmt.Errorf("template %q: %w", name, errdefs.ErrNotFound)
	default:
		return Template{}, err
	}
	if t.Runtimes, err = s.TemplateRuntimes(ctx, name); err != nil {
		return Template{}, err
	}
	return t, nil
}

// PullRequest names an image in a registry and how to reach it.
type PullRequest struct {
	// Image is the reference: registry/repository[:tag|@digest].
	Image string
	// Insecure allows plain HTTP, or TLS without a trusted certificate.
	Insecure bool
	// Username and PasswordSecret (the name of one of the caller's secrets) are the registry's
	// credentials; the password is read from the secret only for the pull, never stored elsewhere.
	Username       string
	PasswordSecret string
}

// importer returns the node that takes images: the in-process one, or, in a cluster without one, a
// node that is up (and not draining). In a cluster the image then reaches the other nodes through the
// blob store (shareImage).
func (s *placer) importer(ctx context.Context) (nodecontract.ImageImporter, error) {
	if imp, ok := s.nodes.local.(nodecontract.ImageImporter); s.nodes.local != nil && ok {
		return imp, nil
	}
	if !s.nodes.clustered() {
		return nil, fmt.Errorf("this server has no node to take template images: %w", errdefs.ErrFailedPrecondition)
	}
	caps, err := s.placeable(ctx)
	if err != nil {
		return nil, err
	}
	ids := slices.Sorted(maps.Keys(caps))
	if len(ids) == 0 {
		return nil, fmt.Errorf("no node is up to take the template image: %w", errdefs.ErrUnavailable)
	}
	n, err := s.node(ctx, ids[rand.IntN(len(ids))])
	if err != nil {
		return nil, err
	}
	imp, ok := n.(nodecontract.ImageImporter)
	if !ok {
		return nil, fmt.Errorf("node %s takes no template images: %w", n.ID(), errdefs.ErrFailedPrecondition)
	}
	return imp, nil
}

// imagePublisher is a node that can write an image it holds into the blob store.
type imagePublisher interface {
	PublishImage(ctx context.Context, digest string) error
}

// shareImage has holder, the node that just took image digest, write it into the blob store when this
// control plane has other nodes (a cluster): they fetch it from there when they are to boot it.
func (s *placer) shareImage(ctx context.Context, holder any, digest string) error {
	if !s.nodes.clustered() {
		return nil
	}
	p, ok := holder.(imagePublisher)
	if !ok {
		return fmt.Errorf("the node that took image %s cannot share it: %w", digest, errdefs.ErrFailedPrecondition)
	}
	if err := p.PublishImage(ctx, digest); err != nil {
		return fmt.Errorf("share image %s with the cluster's nodes: %w", digest, err)
	}
	return nil
}

// PullTemplate fetches an image from a registry and points name at it, as ImportTemplate does.
func (s *placer) PullTemplate(ctx context.Context, tenantID, name string, req PullRequest) (Template, error) {
	if err := checkNewTemplateName(name); err != nil {
		return Template{}, err
	}
	if req.Image == "" {
		return Template{}, fmt.Errorf("image: a registry reference is required: %w", errdefs.ErrInvalidArgument)
	}
	if (req.Username == "") != (req.PasswordSecret == "") {
		return Template{}, fmt.Errorf("username and password_secret go together: %w", errdefs.ErrInvalidArgument)
	}
	imp, err := s.importer(ctx)
	if err != nil {
		return Template{}, err
	}
	opts := oci.PullOptions{Insecure: req.Insecure, Username: req.Username}
	if req.PasswordSecret != "" {
		pw, err := s.accounts.revealSecret(ctx, tenantID, req.PasswordSecret)
		if err != nil {
			return Template{}, fmt.Errorf("password_secret %q: %w", req.PasswordSecret, err)
		}
		defer clear(pw)
		opts.Password = pw
	}
	img, err := imp.PullImage(ctx, req.Image, opts)
	if err != nil {
		return Template{}, fmt.Errorf("pull template %s: %w", name, err)
	}
	if err := s.shareImage(ctx, imp, img.Digest); err != nil {
		return Template{}, err
	}
	return s.recordTemplate(ctx, name, img)
}

// revealSecret returns the value of the tenant's secret name, for the platform's own use (a registry
// password): never for a sandbox, which only ever sees secrets through the gateway.
func (s *accounts) revealSecret(ctx context.Context, tenantID, name string) ([]byte, error) {
	if s.secrets == nil {
		return nil, fmt.Errorf("this server keeps no secrets: %w", errdefs.ErrFailedPrecondition)
	}
	return s.secrets.Reveal(ctx, tenantID, name)
}

// checkNewTemplateName reports whether name can be given to an image.
func checkNewTemplateName(name string) error {
	if template.IsDefault(name) {
		return fmt.Errorf("template %q is the built-in one; choose another name: %w", name, errdefs.ErrInvalidArgument)
	}
	return oci.CheckName(name)
}

// ImportTemplate imports the OCI image in the archive r (an OCI archive or a `docker save` tarball)
// and points name at it, creating the template or re-pointing it. Sandboxes and sessions created
// before keep the image they recorded.
func (s *placer) ImportTemplate(ctx context.Context, name string, r io.Reader) (Template, error) {
	if err := checkNewTemplateName(name); err != nil {
		return Template{}, err
	}
	imp, err := s.importer(ctx)
	if err != nil {
		return Template{}, err
	}
	img, err := imp.ImportImage(ctx, r)
	if err != nil {
		return Template{}, fmt.Errorf("import template %s: %w", name, err)
	}
	if err := s.shareImage(ctx, imp, img.Digest); err != nil {
		return Template{}, err
	}
	return s.recordTemplate(ctx, name, img)
}

// recordTemplate points name at img, which a node holds now.
func (s *placer) recordTemplate(ctx context.Context, name string, img oci.Image) (Template, error) {
	return s.recordTemplateStart(ctx, name, img, nil, "")
}

// recordTemplateStart points name at img, with start command st (nil: none) and, for the default
// template, the source it was installed from.
func (s *placer) recordTemplateStart(ctx context.Context, name string, img oci.Image, st *TemplateStart, source string) (Template, error) {
	rec := templateDoc{Digest: img.Digest, Config: img.Config, Layers: len(img.Layers), Start: st, CreatedAt: s.now(), Source: source}
	key := templateDocPrefix + name
	for {
		cur, err := s.store.GetDoc(ctx, key)
		version := int64(0)
		switch {
		case err == nil:
			version = cur.Version
			var old templateDoc
			if json.Unmarshal(cur.Value, &old) == nil && !old.CreatedAt.IsZero() {
				rec.CreatedAt = old.CreatedAt
			}
		case !errors.Is(err, errdefs.ErrNotFound):
			return Template{}, err
		}
		b, err := json.Marshal(rec)
		if err != nil {
			return Template{}, err
		}
		d, err := s.store.PutDoc(ctx, store.Doc{Key: key, Value: b, Version: version})
		if errors.Is(err, errdefs.ErrConflict) || errors.Is(err, errdefs.ErrAlreadyExists) || errors.Is(err, errdefs.ErrNotFound) {
			continue // another import or removal of the name meanwhile: the last one wins
		}
		if err != nil {
			return Template{}, fmt.Errorf("record template %s: %w", name, err)
		}
		s.log.Info("template recorded", "template", name, "digest", img.Digest, "layers", len(img.Layers))
		return templateOf(d)
	}
}

// DeleteTemplate removes the name and says what still uses the image it pointed at: the sandboxes,
// sessions (and their snapshots) and other names that recorded it keep it on the nodes; the image goes
// once nothing does (templategc.go).
func (s *placer) DeleteTemplate(ctx context.Context, name string) (TemplateRemoval, error) {
	if template.IsDefault(name) {
		return TemplateRemoval{}, fmt.Errorf("template %q is the built-in one and cannot be removed: %w", name, errdefs.ErrInvalidArgument)
	}
	if err := oci.CheckName(name); err != nil {
		return TemplateRemoval{}, err
	}
	for {
		cur, err := s.store.GetDoc(ctx, templateDocPrefix+name)
		if err != nil {
			if errors.Is(err, errdefs.ErrNotFound) {
				return TemplateRemoval{}, fmt.Errorf("template %q: %w", name, errdefs.ErrNotFound)
			}
			return TemplateRemoval{}, err
		}
		t, err := templateOf(cur)
		if err != nil {
			return TemplateRemoval{}, err
		}
		err = s.store.DeleteDoc(ctx, cur.Key, cur.Version)
		if errors.Is(err, errdefs.ErrConflict) {
			continue // re-pointed meanwhile: remove what it is now
		}
		if err != nil {
			return TemplateRemoval{}, err
		}
		out := TemplateRemoval{Name: name, Digest: t.Digest}
		users, err := s.imageUsers(ctx)
		if err != nil {
			s.log.Warn("template removed; what still uses its image is unknown", "template", name, "err", err)
			return out, nil
		}
		if u := users[t.Digest]; u != nil {
			out.Users = *u
		}
		return out, nil
	}
}

// resolveTemplate returns what a sandbox created from template ref records: "default" for the built-in
// template; NAME@DIGEST for a name (the digest it points at now); a NAME@DIGEST reference as it is, if
// NAME points, or pointed, at that image (the node checks it has it).
func (s *placer) resolveTemplate(ctx context.Context, ref string) (string, error) {
	name, digest, err := template.ParseRef(ref)
	if err != nil {
		return "", err
	}
	if digest != "" {
		return name + "@" + digest, nil
	}
	t, err := s.GetTemplate(ctx, name)
	if err != nil {
		return "", err
	}
	return t.Ref, nil
}

// templateOf reads a template's document.
func templateOf(d store.Doc) (Template, error) {
	var rec templateDoc
	if err := json.Unmarshal(d.Value, &rec); err != nil {
		return Template{}, fmt.Errorf("template record %s: %w", d.Key, err)
	}
	name := strings.TrimPrefix(d.Key, templateDocPrefix)
	return Template{Name: name, Ref: name + "@" + rec.Digest, Digest: rec.Digest, Builtin: name == template.DefaultName, Config: rec.Config,
		Layers: rec.Layers, Start: rec.Start, CreatedAt: rec.CreatedAt, UpdatedAt: d.UpdatedAt}, nil
}

// maker returns the node that makes images: the in-process one.
func (s *placer) maker() (nodecontract.ImageMaker, error) {
	m, ok := s.nodes.local.(nodecontract.ImageMaker)
	if s.nodes.local == nil || !ok {
		return nil, fmt.Errorf("building templates on a cluster's nodes is not supported yet (their layers are to travel through the blob store); build on a single-binary server: %w", errdefs.ErrFailedPrecondition)
	}
	return m, nil
}

// canMakeImages reports why images cannot be made here, if they cannot.
func (s *placer) canMakeImages() error {
	_, err := s.maker()
	return err
}

// deriveImage makes an image from the stored image parent (or oci.Scratch) and step.
func (s *placer) deriveImage(ctx context.Context, parent string, step oci.Step) (oci.Image, error) {
	m, err := s.maker()
	if err != nil {
		return oci.Image{}, err
	}
	return m.DeriveImage(ctx, parent, step)
}

// commitSandbox makes an image of what sandbox sb wrote over its template image.
func (s *placer) commitSandbox(ctx context.Context, sb store.Sandbox, step oci.Step) (oci.Image, error) {
	m, err := s.maker()
	if err != nil {
		return oci.Image{}, err
	}
	if !s.nodes.isLocal(sb.NodeID) {
		return oci.Image{}, fmt.Errorf("sandbox %s is on node %s, not this server's: %w", sb.ID, sb.NodeID, errdefs.ErrFailedPrecondition)
	}
	return m.CommitSandbox(ctx, sb.ID, sb.Template, step)
}

// saveStart saves sandbox sb, of a template with its start command ready, as start snapshot key.
func (s *placer) saveStart(ctx context.Context, sb store.Sandbox, key string) error {
	m, err := s.maker()
	if err != nil {
		return err
	}
	if !s.nodes.isLocal(sb.NodeID) {
		return fmt.Errorf("sandbox %s is on node %s, not this server's: %w", sb.ID, sb.NodeID, errdefs.ErrFailedPrecondition)
	}
	return m.SaveStart(ctx, sb.ID, key)
}

// image returns the stored image digest.
func (s *placer) image(digest string) (oci.Image, error) {
	m, err := s.maker()
	if err != nil {
		return oci.Image{}, err
	}
	return m.StoredImage(digest)
}

// ExportTemplate writes the image of template ref (NAME or NAME@sha256:…) to w as an OCI archive. Before
// anything is written it checks that the image is there: an error after that is the writer's.
func (s *placer) ExportTemplate(ctx context.Context, ref string, w func() io.Writer) error {
	digest, err := s.imageOf(ctx, ref, "cannot be exported")
	if err != nil {
		return err
	}
	m, err := s.maker()
	if err != nil {
		return err
	}
	if _, err := m.StoredImage(digest); err != nil {
		return err
	}
	return m.ExportImage(ctx, digest, w())
}

// imageOf returns the digest of the image template ref (NAME or NAME@sha256:…) boots; the built-in
// template, which is not an image, is refused saying it cannot be used so (what).
func (s *placer) imageOf(ctx context.Context, ref, what string) (string, error) {
	resolved, err := s.resolveTemplate(ctx, ref)
	if err != nil {
		return "", err
	}
	_, digest, err := template.ParseRef(resolved)
	if err != nil {
		return "", err
	}
	if digest == "" {
		return "", fmt.Errorf("the built-in template is not an image and %s: %w", what, errdefs.ErrInvalidArgument)
	}
	return digest, nil
}
