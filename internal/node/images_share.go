package node

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/airlockrun/airlock/internal/blob"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/template"
	"github.com/airlockrun/airlock/internal/template/oci"
)

// ImageSharer is a template registry whose images travel between a cluster's nodes through the blob
// store the snapshots use (template.Catalog; see oci.Store.Publish).
type ImageSharer interface {
	Publish(ctx context.Context, bs blob.Store, digest string) error
	Fetch(ctx context.Context, bs blob.Store, digest string) (oci.Image, error)
	Images() ([]oci.Image, error)
}

// sharer returns the node's templates and blob store for sharing images, or why it has none.
func (n *Local) sharer() (ImageSharer, blob.Store, error) {
	sh, ok := n.cfg.Templates.(ImageSharer)
	if !ok {
		return nil, nil, fmt.Errorf("this node's templates cannot share images: %w", errdefs.ErrFailedPrecondition)
	}
	if n.cfg.Snapshots == nil {
		return nil, nil, fmt.Errorf("node %s has no blob store to share images through: %w", n.cfg.ID, errdefs.ErrFailedPrecondition)
	}
	return sh, n.cfg.Snapshots.Blobs(), nil
}

// PublishImage writes the image digest the node holds into the blob store, from where the cluster's
// other nodes fetch it when they are to boot it.
func (n *Local) PublishImage(ctx context.Context, digest string) error {
	sh, bs, err := n.sharer()
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := sh.Publish(ctx, bs, digest); err != nil {
		return err
	}
	n.log.Info("template image published", "digest", digest, "took", time.Since(t0))
	return nil
}

// template returns the template ref names, fetching from the blob store an image template the node
// does not hold (another node imported, pulled or built it and published it there).
func (n *Local) template(ctx context.Context, ref string) (template.Template, error) {
	tpl, err := n.cfg.Templates.Get(ctx, ref)
	if err == nil || !errors.Is(err, errdefs.ErrNotFound) {
		return tpl, err
	}
	_, digest, perr := template.ParseRef(ref)
	if perr != nil || digest == "" {
		return tpl, err
	}
	sh, bs, serr := n.sharer()
	if serr != nil {
		return tpl, err
	}
	t0 := time.Now()
	img, ferr := sh.Fetch(ctx, bs, digest)
	if ferr != nil {
		return tpl, fmt.Errorf("template %s: %w", ref, ferr)
	}
	n.log.Info("template image fetched from the blob store", "digest", digest, "layers", len(img.Layers), "took", time.Since(t0))
	return n.cfg.Templates.Get(ctx, ref)
}

// maxReportedImages bounds the image digests a heartbeat carries.
const maxReportedImages = 256

// ImageDigests reports the digests of the template images the node holds (at most maxReportedImages),
// for placement to prefer a node that need not fetch one.
func (n *Local) ImageDigests() []string {
	sh, ok := n.cfg.Templates.(ImageSharer)
	if !ok {
		return nil
	}
	imgs, err := sh.Images()
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(imgs))
	for _, img := range imgs {
		out = append(out, img.Digest)
	}
	sort.Strings(out)
	if len(out) > maxReportedImages {
		out = out[:maxReportedImages]
	}
	return out
}
