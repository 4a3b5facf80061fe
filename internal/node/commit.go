package node

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/runtime"
	"github.com/airlockrun/airlock/internal/template"
	"github.com/airlockrun/airlock/internal/template/oci"
)

// ImageDeriver is a template registry that can make images from stored ones, and export them
// (template.Catalog).
type ImageDeriver interface {
	Derive(ctx context.Context, parent string, step oci.Step) (oci.Image, error)
	Export(ctx context.Context, digest string, w io.Writer) error
	Image(digest string) (oci.Image, error)
	Images() ([]oci.Image, error)
	RemoveImages(digests []string) (oci.GCStats, error)
}

func (n *Local) deriver() (ImageDeriver, error) {
	d, ok := n.cfg.Templates.(ImageDeriver)
	if !ok {
		return nil, fmt.Errorf("this node's templates cannot make images: %w", errdefs.ErrFailedPrecondition)
	}
	return d, nil
}

// DeriveImage makes an image from the stored image parent (a digest, or oci.Scratch) and step, and
// returns it (a build's COPY, ENV, USER… steps).
func (n *Local) DeriveImage(ctx context.Context, parent string, step oci.Step) (oci.Image, error) {
	d, err := n.deriver()
	if err != nil {
		return oci.Image{}, err
	}
	return d.Derive(ctx, parent, step)
}

// StoredImage returns the image digest the node holds (errdefs.ErrNotFound if it does not).
func (n *Local) StoredImage(digest string) (oci.Image, error) {
	d, err := n.deriver()
	if err != nil {
		return oci.Image{}, err
	}
	return d.Image(digest)
}

// Images returns the images the node holds.
func (n *Local) Images() ([]oci.Image, error) {
	d, err := n.deriver()
	if err != nil {
		return nil, err
	}
	return d.Images()
}

// RemoveImages removes the images digests, which no sandbox of the node may still boot from, and the
// layers and blobs no other image uses.
func (n *Local) RemoveImages(digests []string) (oci.GCStats, error) {
	d, err := n.deriver()
	if err != nil {
		return oci.GCStats{}, err
	}
	for _, dg := range digests {
		n.dropWarmImage(dg)
	}
	st, err := d.RemoveImages(digests)
	if err != nil {
		return st, err
	}
	for _, dg := range digests {
		if err := n.starts.remove(dg); err != nil {
			return st, fmt.Errorf("remove the start snapshots of %s: %w", dg, err)
		}
	}
	return st, nil
}

// ExportImage writes the image digest to w as an OCI archive.
func (n *Local) ExportImage(ctx context.Context, digest string, w io.Writer) error {
	d, err := n.deriver()
	if err != nil {
		return err
	}
	return d.Export(ctx, digest, w)
}

// CommitSandbox makes an image of what sandbox id wrote over its template, the image templateRef
// (NAME@sha256:…, the reference the sandbox was created with) names (a build's RUN step): it saves the sandbox, which stays stopped for the caller to destroy, turns the saved writable
// layer into an image layer (oci.FromOverlay) and derives the image from parent with it and step's
// config. What the node itself put into the sandbox (its interception CA in the trust store) is left
// out. The sandbox's files are its own work, hostile: they are read from the archive the driver wrote,
// never followed on the host, and checked as any image layer is.
func (n *Local) CommitSandbox(ctx context.Context, id, templateRef string, step oci.Step) (oci.Image, error) {
	d, err := n.deriver()
	if err != nil {
		return oci.Image{}, err
	}
	if _, err := n.lookup(id); err != nil {
		return oci.Image{}, err
	}
	_, parent, err := template.ParseRef(templateRef)
	if err != nil {
		return oci.Image{}, err
	}
	if parent == "" {
		return oci.Image{}, fmt.Errorf("template %q is not an image: only a sandbox of an image template can be committed: %w", templateRef, errdefs.ErrInvalidArgument)
	}
	drv := n.drv.driverOf(id)
	files, ok := drv.(runtime.ImageFiles)
	if !ok {
		return oci.Image{}, fmt.Errorf("the %s runtime does not save a sandbox's files apart: %w", drv.Name(), errdefs.ErrFailedPrecondition)
	}
	var caPEM, roots []byte
	if gw := n.cfg.Gateway; gw != nil {
		if caPEM, err = gw.CACertPEM(id); err != nil {
			return oci.Image{}, err
		}
		tpl, err := n.cfg.Templates.Get(ctx, templateRef)
		if err != nil {
			return oci.Image{}, err
		}
		if roots, err = readTemplateFile(tpl.RootFS, trustBundle, maxTrustBundle); err != nil {
			return oci.Image{}, err
		}
	}
	commits := filepath.Join(n.cfg.DataDir, "commits")
	if err := os.MkdirAll(commits, 0o700); err != nil {
		return oci.Image{}, err
	}
	dir := filepath.Join(commits, id)
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(ctx, checkpointTimeout)
	defer cancel()
	if err := n.checkpoint(ctx, id, dir, false, false, nil); err != nil {
		return oci.Image{}, fmt.Errorf("commit sandbox %s: %w", id, err)
	}
	f, err := os.Open(filepath.Join(dir, files.FilesPart()))
	if err != nil {
		return oci.Image{}, fmt.Errorf("commit sandbox %s: %w", id, err)
	}
	defer f.Close()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { // owner: CommitSandbox, which waits for it
		err := oci.FromOverlay(withoutTrust(f, roots, caPEM), pw)
		pw.CloseWithError(err)
		done <- err
	}()
	img, err := d.Derive(ctx, parent, oci.Step{Layer: pr, Config: step.Config, CreatedBy: step.CreatedBy})
	pr.CloseWithError(errors.New("commit ended"))
	if werr := <-done; err == nil && werr != nil {
		err = werr
	}
	if err != nil {
		return oci.Image{}, fmt.Errorf("commit sandbox %s: %w", id, err)
	}
	return img, nil
}

// withoutTrust returns the archive of a writable layer r without what installTrust put there: the
// sandbox's CA file, and the CA appended to the template's bundle roots (the bundle is left out if that
// was all, kept without the CA if a step rewrote it and kept the CA last, kept as it is otherwise).
func withoutTrust(r io.Reader, roots, caPEM []byte) io.Reader {
	if caPEM == nil {
		return r
	}
	pr, pw := io.Pipe()
	go func() { // owner: the reader; ends when the archive is read or the reader closes
		pw.CloseWithError(filterTrust(r, pw, roots, caPEM))
	}()
	return pr
}

func filterTrust(r io.Reader, w io.Writer, roots, caPEM []byte) error {
	tr := tar.NewReader(r)
	tw := tar.NewWriter(w)
	bundle, ca := strings.TrimPrefix(trustBundle, "/"), strings.TrimPrefix(sandboxCA, "/")
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return tw.Close()
		}
		if err != nil {
			return fmt.Errorf("%w: the writable layer's archive: %v", oci.ErrBadLayer, err)
		}
		var body io.Reader = tr
		switch {
		case h.Name == ca && h.Typeflag == tar.TypeReg:
			continue
		case h.Name == bundle && h.Typeflag == tar.TypeReg && h.Size <= maxTrustBundle+int64(len(caPEM))+1:
			b, err := io.ReadAll(io.LimitReader(tr, h.Size))
			if err != nil {
				return fmt.Errorf("%w: %s: %v", oci.ErrBadLayer, h.Name, err)
			}
			if cut, ok := bytes.CutSuffix(b, caPEM); ok {
				cut = bytes.TrimSuffix(cut, []byte("\n"))
				if bytes.Equal(cut, bytes.TrimSuffix(roots, []byte("\n"))) || bytes.Equal(cut, roots) {
					continue // the template's bundle and the CA: nothing of the step's
				}
				b = cut
			}
			h.Size = int64(len(b))
			body = bytes.NewReader(b)
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg && h.Size > 0 {
			if _, err := io.CopyN(tw, body, h.Size); err != nil {
				return fmt.Errorf("%w: %s: %v", oci.ErrBadLayer, h.Name, err)
			}
		}
	}
}

var _ ImageDeriver = (*template.Catalog)(nil)
