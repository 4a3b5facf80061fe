package runc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/runtime"
	"github.com/airlockrun/airlock/internal/runtime/sandboxdir"
)

// ImageFile marks a checkpoint image as runc's: files only.
const ImageFile = "runc.json"

type imageRecord struct {
	Driver    string `json:"driver"`
	FilesOnly bool   `json:"files_only"`
}

// Checkpoint saves the sandbox's writable layer into imageDir (which must be empty or missing), as
// ImageFSFile, while the container is frozen (runc pause), so the archive is of one moment. With
// opts.LeaveRunning the container runs on and its daemon is woken; without, it stays frozen until
// Destroy or Unpause. See runtime.Checkpointer; the image holds files only (runtime.FilesOnly).
func (d *Driver) Checkpoint(ctx context.Context, id, imageDir string, opts runtime.CheckpointOptions) error {
	if !idPattern.MatchString(id) {
		return fmt.Errorf("runc: bad sandbox id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	if err := os.MkdirAll(imageDir, 0o700); err != nil {
		return err
	}
	start := time.Now()
	if err := d.oci.Run(ctx, "pause", id); err != nil {
		return fmt.Errorf("runc: checkpoint %s: %w", id, err)
	}
	if err := sandboxdir.WriteLayerTar(filepath.Join(d.dir(id), "disk", "upper"), filepath.Join(imageDir, ImageFSFile)); err != nil {
		return fmt.Errorf("runc: checkpoint %s: writable layer: %w", id, err)
	}
	b, _ := json.Marshal(imageRecord{Driver: "runc", FilesOnly: true})
	if err := os.WriteFile(filepath.Join(imageDir, ImageFile), b, 0o600); err != nil {
		return err
	}
	if err := sandboxdir.SyncTree(imageDir); err != nil {
		return fmt.Errorf("runc: checkpoint %s: %w", id, err)
	}
	tFS := time.Since(start)
	if opts.LeaveRunning {
		if err := d.Unpause(ctx, id); err != nil {
			return fmt.Errorf("runc: checkpoint %s: %w", id, err)
		}
	}
	d.log.Debug("checkpoint", "sandbox", id, "fs", tFS, "resume", time.Since(start)-tFS)
	return nil
}

// Unpause thaws a sandbox a checkpoint left frozen and wakes its daemon, waiting until it listens
// again. A running sandbox whose daemon listens is left alone. See runtime.Pauser.
func (d *Driver) Unpause(ctx context.Context, id string) error {
	st, err := d.oci.State(ctx, id)
	if err != nil {
		return err
	}
	if st.Status == "paused" {
		if err := d.oci.Run(ctx, "resume", id); err != nil {
			return fmt.Errorf("runc: unpause %s: %w", id, err)
		}
	}
	sd := d.sdir(id)
	if sd.SocketPresent() {
		return nil
	}
	if err := sd.TouchWake(); err != nil {
		return fmt.Errorf("runc: unpause %s: %w", id, err)
	}
	if err := sd.WaitForSocket(ctx, 15*time.Second); err != nil {
		return fmt.Errorf("runc: unpause %s: daemon did not listen again: %w", id, err)
	}
	return nil
}

// Restore boots spec.ID anew over the writable layer Checkpoint saved into imageDir: the files come
// back, the processes start again. Restoring one image into several IDs forks it. See
// runtime.Restorer.
func (d *Driver) Restore(ctx context.Context, spec runtime.Spec, imageDir string) (runtime.Sandbox, error) {
	b, err := os.ReadFile(filepath.Join(imageDir, ImageFile))
	var rec imageRecord
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	if err != nil || rec.Driver != "runc" {
		if errors.Is(err, os.ErrNotExist) {
			err = errors.New("not made by the runc driver")
		}
		return runtime.Sandbox{}, fmt.Errorf("runc: restore %s: image %s: %v: %w", spec.ID, imageDir, err, errdefs.ErrInvalidArgument)
	}
	return d.boot(ctx, spec, func(upper string) error {
		return sandboxdir.ReadLayerTar(filepath.Join(imageDir, ImageFSFile), upper)
	})
}
