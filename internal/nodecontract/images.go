package nodecontract

import (
	"context"
	"io"

	"github.com/airlockrun/airlock/internal/snapshot"
	"github.com/airlockrun/airlock/internal/template/oci"
)

// CheckpointRequest says which snapshot a checkpoint makes.
type CheckpointRequest struct {
	// SnapshotID names the snapshot; the image is kept under it until it is stored.
	SnapshotID string
	// LeaveRunning keeps the sandbox running; without it the sandbox stays frozen until DestroySandbox
	// or UnpauseSandbox.
	LeaveRunning bool
	// IfIdle refuses the checkpoint (ErrBusy, a conflict) while calls or streams are in progress on the
	// sandbox's channel, from this node or any control plane: a rolling snapshot waits for work.
	IfIdle bool
}

// Image describes a checkpoint image a node saved.
type Image struct {
	// Bytes is the image's size.
	Bytes int64 `json:"bytes"`
	// FilesPart names the image's file holding the sandbox's writable layer as a tar archive
	// (runtime.ImageFiles); empty when the driver keeps none.
	FilesPart string `json:"files_part,omitempty"`
	// Runtime names the driver that made it (a restore must use the same); FilesOnly says the image
	// holds files only (runtime.FilesOnly).
	Runtime   string `json:"runtime,omitempty"`
	FilesOnly bool   `json:"files_only,omitempty"`
}

// StoreRequest asks a node to write the image it saved for a snapshot into the snapshot store.
type StoreRequest struct {
	TenantID   string
	SnapshotID string
	// Grant opens the tenant's snapshots; the caller clears it after the call.
	Grant *snapshot.Grant
	// Meta goes into the snapshot's manifest.
	Meta map[string]string
}

// ImageSource names the snapshot a sandbox is restored from.
type ImageSource struct {
	SnapshotID string
	// Grant opens the tenant's snapshots, for a node that must fetch the image; the caller clears it
	// after the call.
	Grant *snapshot.Grant
}

// ImageImporter is a node that can import and pull OCI images (the in-process node; a control plane
// asserts it of a Node).
type ImageImporter interface {
	ImportImage(ctx context.Context, r io.Reader) (oci.Image, error)
	PullImage(ctx context.Context, ref string, opts oci.PullOptions) (oci.Image, error)
}

// ImageMaker is a node that can make images from stored ones (the in-process node): a build's steps.
type ImageMaker interface {
	DeriveImage(ctx context.Context, parent string, step oci.Step) (oci.Image, error)
	CommitSandbox(ctx context.Context, id, templateRef string, step oci.Step) (oci.Image, error)
	StoredImage(digest string) (oci.Image, error)
	ExportImage(ctx context.Context, digest string, w io.Writer) error
	Images() ([]oci.Image, error)
	RemoveImages(digests []string) (oci.GCStats, error)
	SaveStart(ctx context.Context, id, key string) error
}

// MaxImageUpload bounds an image archive sent to ImportImage.
const MaxImageUpload = 32 << 30
