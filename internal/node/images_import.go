package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/template/oci"
)

// ImageImporter is a template registry that can import OCI images (template.Catalog).
type ImageImporter interface {
	Import(ctx context.Context, src string) (oci.Image, error)
}

// ImportImage imports the OCI image in the archive r (an OCI archive or a `docker save` tarball) into
// the node's template store and returns it: the control plane then names it. The archive is spooled
// under the node's data directory first and removed after.
func (n *Local) ImportImage(ctx context.Context, r io.Reader) (oci.Image, error) {
	imp, ok := n.cfg.Templates.(ImageImporter)
	if !ok {
		return oci.Image{}, fmt.Errorf("this node's templates cannot import images: %w", errdefs.ErrFailedPrecondition)
	}
	f, err := os.CreateTemp(n.cfg.DataDir, ".image-upload-")
	if err != nil {
		return oci.Image{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	size, err := spool(f, io.LimitReader(r, nodecontract.MaxImageUpload+1))
	if err != nil {
		return oci.Image{}, fmt.Errorf("receive the image: %w", err)
	}
	if size > nodecontract.MaxImageUpload {
		return oci.Image{}, fmt.Errorf("the image archive is over %d GiB: %w", nodecontract.MaxImageUpload>>30, errdefs.ErrTooLarge)
	}
	if size == 0 {
		return oci.Image{}, fmt.Errorf("the image archive is empty: %w", errdefs.ErrInvalidArgument)
	}
	if err := f.Close(); err != nil {
		return oci.Image{}, err
	}
	return imp.Import(ctx, f.Name())
}

// spoolMinFree is the room a spooled upload leaves on the node's file system.
const spoolMinFree = oci.DefaultMinFree

// spool copies r into f, refusing (resource exhausted) before the file system would have less than
// spoolMinFree free: an upload cannot fill the disk under the node's sandboxes.
func spool(f *os.File, r io.Reader) (int64, error) {
	var total int64
	for {
		var st unix.Statfs_t
		if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
			return total, err
		}
		const chunk = 16 << 20
		if int64(st.Bavail)*st.Bsize-chunk < spoolMinFree {
			return total, fmt.Errorf("the node's disk would have less than %d MiB free: %w", spoolMinFree>>20, errdefs.ErrResourceExhausted)
		}
		n, err := io.CopyN(f, r, chunk)
		total += n
		if errors.Is(err, io.EOF) {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// ImagePuller is a template registry that can pull OCI images from registries (template.Catalog).
type ImagePuller interface {
	Pull(ctx context.Context, ref string, opts oci.PullOptions) (oci.Image, error)
}

// PullImage fetches the image ref names from its registry into the node's template store and returns
// it: the control plane then names it.
func (n *Local) PullImage(ctx context.Context, ref string, opts oci.PullOptions) (oci.Image, error) {
	p, ok := n.cfg.Templates.(ImagePuller)
	if !ok {
		return oci.Image{}, fmt.Errorf("this node's templates cannot pull images: %w", errdefs.ErrFailedPrecondition)
	}
	return p.Pull(ctx, ref, opts)
}
