package nodecontract

import (
	"context"
	"fmt"
	"io"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/snapshot"
	"github.com/airlockrun/airlock/internal/template/oci"
)

// Then says what becomes of a sandbox once Snapshot has saved it.
type Then string

// What Snapshot may do with the sandbox it saved.
const (
	// ThenRun lets it run on (a rolling or a named snapshot).
	ThenRun Then = "run"
	// ThenDestroy destroys it (a pause): the image is all that is left of it.
	ThenDestroy Then = "destroy"
)

// SnapshotRequest says which snapshot Snapshot takes, for whom, and what becomes of the sandbox.
type SnapshotRequest struct {
	// TenantID owns the sandbox and the snapshot; SnapshotID names the snapshot.
	TenantID   string
	SnapshotID string
	// Then is what the node does with the sandbox once the image is saved.
	Then Then
	// IfIdle refuses the snapshot (ErrBusy, a conflict) while calls or streams are in progress on the
	// sandbox's channel, from this node or any control plane: a rolling snapshot waits for work.
	IfIdle bool
	// Meta goes into the stored snapshot's manifest.
	Meta map[string]string
}

// Check reports what is wrong with r, if anything (an error wrapping errdefs.ErrInvalidArgument).
func (r SnapshotRequest) Check() error {
	switch {
	case r.TenantID == "" || r.SnapshotID == "":
		return fmt.Errorf("snapshot request: a tenant and a snapshot ID are required: %w", errdefs.ErrInvalidArgument)
	case r.Then != ThenRun && r.Then != ThenDestroy:
		return fmt.Errorf("snapshot request: then %q: want %q or %q: %w", r.Then, ThenRun, ThenDestroy, errdefs.ErrInvalidArgument)
	}
	return nil
}

// SnapshotReport is what a node reports of a snapshot it took once the image is stored (or is lost).
type SnapshotReport struct {
	TenantID   string `json:"tenant"`
	SnapshotID string `json:"snapshot"`
	// Image describes the saved image, as Snapshot returned it: a control plane that lost Snapshot's
	// answer (it crashed) records the snapshot from the report.
	Image Image `json:"image"`
	// LogicalBytes and NewStoredBytes are the stored snapshot's statistics (snapshot.Stats); StoreMillis
	// is how long the store took.
	LogicalBytes   int64 `json:"logical_bytes"`
	NewStoredBytes int64 `json:"new_stored_bytes"`
	StoreMillis    int64 `json:"store_ms"`
	// Lost, if set, says why the image is gone and was never stored (the snapshot cannot be restored).
	Lost string `json:"lost,omitempty"`
}

// MaxLostReason bounds SnapshotReport.Lost.
const MaxLostReason = 1 << 10

// SnapshotCalls is what a node asks of the control plane for the snapshots it stores: the calls of
// nodeapi.Control for a node in a process of its own, the control plane's own methods in its process.
// A snapshot that is no longer waiting for its image (deleted, failed, or never recorded for this
// node) is errdefs.ErrNotFound from both: the node drops the image. Other errors are tried again.
type SnapshotCalls interface {
	// SnapshotSaved says that the node saved rep.Image for rep's snapshot (rep's statistics and Lost
	// unset), which puts it on record. The node says it before Snapshot answers, so that the image is
	// on record even if the control plane that called loses the answer; with ThenDestroy, before the
	// sandbox goes: if it cannot be said, the sandbox runs on and the snapshot fails. With ThenRun a
	// failure does not fail the snapshot, and the node says it again before it stores the image.
	SnapshotSaved(ctx context.Context, rep SnapshotReport) error
	// SnapshotGrant returns the grant that opens the tenant's snapshots, to store snapshotID, which the
	// node took; the node clears it after the store.
	SnapshotGrant(ctx context.Context, tenantID, snapshotID string) (*snapshot.Grant, error)
	// SnapshotStored reports a snapshot stored, or lost (SnapshotReport.Lost).
	SnapshotStored(ctx context.Context, rep SnapshotReport) error
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
