package fake

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/runtime"
)

// The layout of a checkpoint image directory of the fake.
const (
	// ImageFile records the checkpointed sandbox (Image, as JSON).
	ImageFile = "fake.json"
	// ImageFSFile is the sandbox's writable layer as a tar archive: its directories, regular files and
	// symbolic links, by paths relative to the layer. The fake's layer has nothing under it, so the
	// archive has no whiteouts.
	ImageFSFile = "fs.tar"
)

// Image is what a checkpoint image of the fake records of its sandbox.
type Image struct {
	// ID names the checkpointed sandbox.
	ID string `json:"id"`
	// Env is the base environment of its daemon.
	Env []string `json:"env,omitempty"`
	// Checkpoint numbers the checkpoint among those made of the sandbox (and of the sandboxes whose
	// images it was restored from), from 1.
	Checkpoint int `json:"checkpoint"`
}

// ReadImage reads the record of the checkpoint image in dir. A directory without one is
// errdefs.ErrInvalidArgument.
func ReadImage(dir string) (Image, error) {
	var img Image
	b, err := os.ReadFile(filepath.Join(dir, ImageFile))
	if errors.Is(err, fs.ErrNotExist) {
		return img, fmt.Errorf("fake: no checkpoint image in %s: %w", dir, errdefs.ErrInvalidArgument)
	}
	if err != nil {
		return img, fmt.Errorf("fake: %w", err)
	}
	if err := json.Unmarshal(b, &img); err != nil {
		return img, fmt.Errorf("fake: %s: %v: %w", ImageFile, err, errdefs.ErrInvalidArgument)
	}
	return img, nil
}

// FilesPart names the image's writable-layer archive (runtime.ImageFiles).
func (d *Driver) FilesPart() string { return ImageFSFile }

// Checkpoint pauses the sandbox and writes its record and writable layer into imageDir (which must be
// empty or missing). With opts.LeaveRunning it then wakes the daemon and returns once it listens again;
// otherwise the sandbox stays paused until Unpause or Destroy. See runtime.Checkpointer.
//
// As with gVisor, a sandbox whose daemon still listens (the caller did not quiesce it) cannot be saved:
// errdefs.ErrFailedPrecondition, and the sandbox is left as it was. Any later failure, an injected one
// (Fail(OpCheckpoint, …)) included, leaves the sandbox paused and its daemon quiesced, for the caller's
// Unpause: stricter than the gvisor driver, which resumes a sandbox it was to leave running, so that
// tests see the caller's own recovery.
func (d *Driver) Checkpoint(ctx context.Context, id, imageDir string, opts runtime.CheckpointOptions) error {
	sb, err := d.running(id)
	if err != nil {
		return err
	}
	d.mu.Lock()
	if sb.ln != nil {
		d.mu.Unlock()
		return fmt.Errorf("fake: checkpoint %s: its daemon still listens on a host socket, which cannot be saved; quiesce it first: %w", id, errdefs.ErrFailedPrecondition)
	}
	sb.paused = true
	img := Image{ID: id, Env: sb.env, Checkpoint: sb.checkpoints + 1}
	d.mu.Unlock()
	if err := d.failure(OpCheckpoint, id); err != nil {
		return err
	}
	if err := writeImage(imageDir, img, filepath.Join(sb.dir, "layer")); err != nil {
		return fmt.Errorf("fake: checkpoint %s: %w", id, err)
	}
	d.mu.Lock()
	sb.checkpoints = img.Checkpoint
	d.mu.Unlock()
	if !opts.LeaveRunning {
		return nil
	}
	if err := d.resume(ctx, sb); err != nil {
		return fmt.Errorf("fake: checkpoint %s: %w", id, err)
	}
	return nil
}

// writeImage writes img and the writable layer at layer into imageDir.
func writeImage(imageDir string, img Image, layer string) error {
	if err := os.MkdirAll(imageDir, 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(img)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(imageDir, ImageFile), b, 0o600); err != nil {
		return err
	}
	if err := writeLayerTar(layer, filepath.Join(imageDir, ImageFSFile)); err != nil {
		return fmt.Errorf("writable layer: %w", err)
	}
	return nil
}

// Unpause lets a paused sandbox run again and wakes its daemon if it is quiesced, returning once it
// listens. A running sandbox whose daemon listens is left alone. See runtime.Pauser.
func (d *Driver) Unpause(ctx context.Context, id string) error {
	if err := d.failure(OpUnpause, id); err != nil {
		return err
	}
	sb, err := d.running(id)
	if err != nil {
		return err
	}
	d.mu.Lock()
	sb.unpauses++
	d.mu.Unlock()
	if err := d.resume(ctx, sb); err != nil {
		return fmt.Errorf("fake: unpause %s: %w", id, err)
	}
	return nil
}

// resumeWait bounds how long resume waits for a woken daemon to listen again.
const resumeWait = 15 * time.Second

// resume un-pauses sb and, if its daemon is quiesced, wakes it and waits until it listens again.
func (d *Driver) resume(ctx context.Context, sb *sandbox) error {
	d.mu.Lock()
	sb.paused = false
	up := sb.up
	if sb.ln == nil {
		select {
		case sb.wake <- struct{}{}:
		default: // a wake is pending already
		}
	}
	d.mu.Unlock()
	t := time.NewTimer(resumeWait)
	defer t.Stop()
	select {
	case <-up:
		return nil
	case <-sb.stopped:
		return fmt.Errorf("the sandbox stopped: %w", errdefs.ErrUnavailable)
	case <-t.C:
		return fmt.Errorf("its daemon did not listen again within %s: %w", resumeWait, errdefs.ErrUnavailable)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Restore boots spec.ID from the image in imageDir: a new sandbox whose layer is the image's and whose
// daemon has the image's environment (spec.Env is ignored, as a real restore ignores it). Info reports
// the image's record as RestoredFrom. Restoring one image into several IDs forks it. See
// runtime.Restorer.
func (d *Driver) Restore(ctx context.Context, spec runtime.Spec, imageDir string) (runtime.Sandbox, error) {
	return d.restore(spec, imageDir, false)
}

// RestoreQuiesced is Restore with the daemon not started until Wake. See runtime.WarmRestorer.
func (d *Driver) RestoreQuiesced(ctx context.Context, spec runtime.Spec, imageDir string) (runtime.Sandbox, error) {
	return d.restore(spec, imageDir, true)
}

// restore boots spec.ID from the image in imageDir, its daemon started unless quiesced.
func (d *Driver) restore(spec runtime.Spec, imageDir string, quiesced bool) (runtime.Sandbox, error) {
	if err := d.failure(OpRestore, spec.ID); err != nil {
		return runtime.Sandbox{}, err
	}
	img, err := ReadImage(imageDir)
	if err != nil {
		return runtime.Sandbox{}, fmt.Errorf("fake: restore %s: %w", spec.ID, err)
	}
	return d.boot(spec, &img, imageDir, quiesced)
}

// Wake starts the daemon of a sandbox RestoreQuiesced booted, with env as its base environment (nil:
// the image's). See runtime.WarmRestorer.
func (d *Driver) Wake(ctx context.Context, id string, env []string) error {
	if err := d.failure(OpWake, id); err != nil {
		return err
	}
	d.mu.Lock()
	sb := d.sandboxes[id]
	var serve func([]string) error
	if sb != nil {
		serve, sb.serve = sb.serve, nil
		if env != nil {
			sb.env = env
		}
		env = sb.env
	}
	d.mu.Unlock()
	if serve == nil {
		return fmt.Errorf("fake: wake %s: no sandbox restored quiesced: %w", id, errdefs.ErrNotFound)
	}
	return serve(env)
}

// writeLayerTar archives the directories, regular files and symbolic links under layer into a new
// file at dst. Other files (sockets, FIFOs) are left out.
func writeLayerTar(layer, dst string) error {
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(layer, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(layer, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		target := ""
		switch {
		case e.Type()&fs.ModeSymlink != 0:
			if target, err = os.Readlink(p); err != nil {
				return err
			}
		case !e.IsDir() && !e.Type().IsRegular():
			return nil
		}
		hdr, err := tar.FileInfoHeader(info, target)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if e.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !e.Type().IsRegular() {
			return nil
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		_, err = io.Copy(tw, in)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// readLayerTar unpacks the archive at src (see writeLayerTar) into the directory layer, beneath it:
// names that are absolute or climb out are refused.
func readLayerTar(src, layer string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	root, err := os.OpenRoot(layer)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(strings.TrimSuffix(hdr.Name, "/"))
		if path.IsAbs(name) || name == "." || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("entry %q: bad name: %w", hdr.Name, errdefs.ErrInvalidArgument)
		}
		name = filepath.FromSlash(name)
		if dir := filepath.Dir(name); dir != "." {
			if err := root.MkdirAll(dir, 0o755); err != nil {
				return err
			}
		}
		mode := hdr.FileInfo().Mode().Perm()
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, mode); err != nil {
				return err
			}
		case tar.TypeReg:
			out, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return err
			}
		}
	}
}
