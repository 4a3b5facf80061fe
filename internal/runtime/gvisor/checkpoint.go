package gvisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/runtime"
	"github.com/airlockrun/airlock/internal/runtime/sandboxdir"
)

// The layout of a checkpoint image directory.
const (
	// ImageMemoryDir holds runsc's checkpoint image: the sandbox's memory and kernel state.
	ImageMemoryDir = "memory"
	// ImageFSFile is the sandbox's writable layer as a tar archive (see fstar.go).
	ImageFSFile = "fs.tar"
	// ImageDaemonFile names the daemon binary the sandbox ran: the base name of its InitBinary. The
	// restored daemon's code is paged in from that file, so it must be the very same binary (another
	// build crashes at once); see runtime.Spec.InitBinary.
	ImageDaemonFile = "daemon"
)

var (
	_ runtime.Checkpointer = (*Driver)(nil)
	_ runtime.Restorer     = (*Driver)(nil)
	_ runtime.Pauser       = (*Driver)(nil)
)

// Unpause resumes a sandbox a checkpoint left paused, or whose daemon a checkpoint left quiesced, and
// wakes its daemon, waiting until it listens again. See runtime.Pauser.
func (d *Driver) Unpause(ctx context.Context, id string) error {
	st, err := d.oci.State(ctx, id)
	if err != nil {
		return err
	}
	// A checkpoint that failed, or that a crash interrupted, may have left the quota lifted.
	if err := d.settleCPUQuota(id); err != nil {
		return fmt.Errorf("gvisor: unpause %s: %w", id, err)
	}
	switch {
	case st.Status == "paused":
		if err := d.runscQuiet(ctx, "resume", id); err != nil {
			return fmt.Errorf("gvisor: unpause %s: %w", id, err)
		}
	case d.sdir(id).SocketPresent():
		return nil // running and listening
	}
	// Paused, or running with its daemon quiesced (a checkpoint interrupted before it froze the sandbox).
	if err := d.wake(ctx, id); err != nil {
		return fmt.Errorf("gvisor: unpause %s: %w", id, err)
	}
	if err := d.waitForSocket(ctx, id, 15*time.Second); err != nil {
		return fmt.Errorf("gvisor: unpause %s: daemon did not listen again: %w", id, err)
	}
	return nil
}

// Checkpoint saves the sandbox's memory, kernel state and writable layer into imageDir (which must be
// empty or missing): runsc's image in imageDir/memory, the layer in imageDir/fs.tar. The sandbox is
// paused from before the memory is saved until the layer is archived, so the two agree; with
// opts.LeaveRunning it then continues, otherwise it stays stopped (Destroy removes it). See
// runtime.Checkpointer.
func (d *Driver) Checkpoint(ctx context.Context, id, imageDir string, opts runtime.CheckpointOptions) error {
	if !idPattern.MatchString(id) {
		return fmt.Errorf("gvisor: bad sandbox id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	if err := os.MkdirAll(filepath.Join(imageDir, ImageMemoryDir), 0o700); err != nil {
		return fmt.Errorf("gvisor: checkpoint %s: %w", id, err)
	}
	daemon, err := d.initBinary(id)
	if err != nil {
		return fmt.Errorf("gvisor: checkpoint %s: %w", id, err)
	}
	if err := os.WriteFile(filepath.Join(imageDir, ImageDaemonFile), []byte(filepath.Base(daemon)+"\n"), 0o600); err != nil {
		return fmt.Errorf("gvisor: checkpoint %s: %w", id, err)
	}
	start := time.Now()
	if err := d.runscQuiet(ctx, "pause", id); err != nil {
		return fmt.Errorf("gvisor: checkpoint %s: pause: %w", id, err)
	}
	paused := true
	defer func() {
		if paused && opts.LeaveRunning {
			if err := d.settleCPUQuota(id); err != nil {
				// It must not run without its quota: left paused, for the caller's Unpause to retry.
				d.log.Warn("cpu quota after a failed checkpoint", "sandbox", id, "err", err)
				return
			}
			if err := d.runscQuiet(context.WithoutCancel(ctx), "resume", id); err != nil {
				d.log.Warn("resume after a failed checkpoint", "sandbox", id, "err", err)
			}
			if err := d.wake(context.WithoutCancel(ctx), id); err != nil {
				d.log.Warn("wake after a failed checkpoint", "sandbox", id, "err", err)
			}
		}
	}()
	// Whatever a process in the sandbox left in the link directory goes into the image, for the
	// sandbox restored from it to find again.
	if err := d.saveLinkDir(id, imageDir); err != nil {
		return fmt.Errorf("gvisor: checkpoint %s: %w", id, err)
	}
	// The checkpoint works unthrottled (see cgroups.go); without, it is slower but the same.
	if err := d.liftCPUQuota(id); err != nil {
		d.log.Warn("checkpoint under the sandbox's cpu quota", "sandbox", id, "err", err)
	}
	// runsc flushes the sandbox's file data to the host before it saves the memory, so the writable
	// layer archived next matches the image. --leave-running keeps the container (still paused by the
	// pause above) for the archive and the resume.
	//
	// A sandbox that stays stopped (a pause) is saved with --direct, O_DIRECT straight to disk: the
	// caller waits for the image to be durable, and that is quickest (1 GiB here: ≈0.8–1.05 s, then
	// 5 ms to sync, against ≈0.5 s plus ≈0.8–0.9 s to sync through the page cache). A sandbox that
	// runs on (a snapshot) is saved through the page cache: its processes are frozen only for the
	// save (256 MiB: ≈0.15 s against ≈0.3 s direct), and the sync comes after they run again.
	args := []string{"checkpoint", "--leave-running", "--image-path", filepath.Join(imageDir, ImageMemoryDir)}
	if !opts.LeaveRunning {
		args = append(args, "--direct")
	}
	if err := d.runscQuiet(ctx, append(args, id)...); err != nil {
		// gVisor cannot save a host socket a process in the sandbox holds: the sandbox's doing, so the
		// caller's to fix, not a fault of the node. runsc says "bound host socket"; the names, when the
		// link directory still has them, say which.
		if names := d.linkSockets(id); len(names) > 0 && strings.Contains(err.Error(), "socket") {
			return fmt.Errorf("gvisor: checkpoint %s: %s in %s: a process in the sandbox holds a host socket there, which cannot be saved; close it and retry (%v): %w",
				id, strings.Join(names, ", "), LinkDir, err, errdefs.ErrFailedPrecondition)
		}
		if strings.Contains(err.Error(), "bound host socket") {
			return fmt.Errorf("gvisor: checkpoint %s: a process in the sandbox holds a host socket (bound under %s), which cannot be saved; close it and retry (%v): %w",
				id, LinkDir, err, errdefs.ErrFailedPrecondition)
		}
		return fmt.Errorf("gvisor: checkpoint %s: %w", id, err)
	}
	tMem := time.Since(start)
	if err := sandboxdir.WriteLayerTar(filepath.Join(d.dir(id), "disk", "upper"), filepath.Join(imageDir, ImageFSFile)); err != nil {
		return fmt.Errorf("gvisor: checkpoint %s: writable layer: %w", id, err)
	}
	tFS := time.Since(start)
	if opts.LeaveRunning {
		paused = false
		if err := d.settleCPUQuota(id); err != nil {
			// Not resumed: it must not run without its quota. The caller unpauses it, retrying this.
			return fmt.Errorf("gvisor: checkpoint %s: %w", id, err)
		}
		if err := d.runscQuiet(ctx, "resume", id); err != nil {
			return fmt.Errorf("gvisor: checkpoint %s: resume: %w", id, err)
		}
		if err := d.wake(ctx, id); err != nil {
			return fmt.Errorf("gvisor: checkpoint %s: %w", id, err)
		}
		// A daemon that quiesced removed its socket; it is back once the file is.
		if err := d.waitForSocket(ctx, id, 15*time.Second); err != nil {
			return fmt.Errorf("gvisor: checkpoint %s: daemon did not listen again: %w", id, err)
		}
	}
	// Durable before the caller may count on it (a sandbox left running no longer waits for this).
	if err := sandboxdir.SyncTree(imageDir); err != nil {
		return fmt.Errorf("gvisor: sync checkpoint image: %w", err)
	}
	d.log.Debug("checkpoint", "sandbox", id, "memory", tMem, "fs", tFS-tMem, "resume/sync", time.Since(start)-tFS)
	return nil
}

// FilesPart names the image's writable-layer archive (runtime.ImageFiles).
func (d *Driver) FilesPart() string { return ImageFSFile }

// Restore boots spec.ID from the image Checkpoint wrote into imageDir: a new writable layer filled from
// the archive, then runsc restore of the memory. Restoring one image into several IDs forks it. spec
// must describe the same template and init as the checkpointed sandbox's; its network namespace may be
// another (the caller addresses it). See runtime.Restorer.
func (d *Driver) Restore(ctx context.Context, spec runtime.Spec, imageDir string) (runtime.Sandbox, error) {
	return d.restore(ctx, spec, imageDir, false)
}

// restore restores spec.ID from imageDir, waking its daemon unless quiesced.
func (d *Driver) restore(ctx context.Context, spec runtime.Spec, imageDir string, quiesced bool) (runtime.Sandbox, error) {
	if _, err := os.Stat(filepath.Join(imageDir, ImageMemoryDir, "checkpoint.img")); err != nil {
		return runtime.Sandbox{}, fmt.Errorf("gvisor: restore %s: no checkpoint image in %s: %w", spec.ID, imageDir, errdefs.ErrInvalidArgument)
	}
	daemon, err := imageDaemon(imageDir, spec.InitBinary)
	if err != nil {
		return runtime.Sandbox{}, fmt.Errorf("gvisor: restore %s: %w", spec.ID, err)
	}
	spec.InitBinary = daemon
	lnk, err := readImageLink(imageDir)
	if err != nil {
		return runtime.Sandbox{}, fmt.Errorf("gvisor: restore %s: %w", spec.ID, err)
	}
	// runsc restores only with the argv the image was made with.
	switch init := lnk.Init; {
	case len(init) > 0:
		if len(init) > 64 || len(spec.Init) == 0 || init[0] != spec.Init[0] {
			return runtime.Sandbox{}, fmt.Errorf("gvisor: restore %s: the image's daemon argv %q does not start with %s: %w", spec.ID, init, spec.Init[0], errdefs.ErrInvalidArgument)
		}
		spec.Init = init
	case !lnk.Control && len(spec.LegacyInit) > 0:
		spec.Init = spec.LegacyInit
	}
	// runsc restores only with the mounts the image was made with: the masks too, those the sandbox was
	// booted with (none for an image made before they were recorded). Host entries hidden since are not
	// hidden from it, as they were not while it ran, until it boots anew.
	masks := make([]runtime.Mask, 0, len(lnk.Masks))
	for _, m := range lnk.Masks {
		if !filepath.IsAbs(m.Path) {
			return runtime.Sandbox{}, fmt.Errorf("gvisor: restore %s: the image's mask %q is not an absolute path: %w", spec.ID, m.Path, errdefs.ErrInvalidArgument)
		}
		masks = append(masks, runtime.Mask{Path: m.Path, Dir: m.Dir})
	}
	if !slices.Equal(masks, spec.Masks) {
		d.log.Info("restored with the masks of its image", "sandbox", spec.ID, "image", len(masks), "now", len(spec.Masks))
	}
	spec.Masks = masks
	// runsc loads the memory in the background after the sandbox runs again (--background), reading
	// the image for a while: it gets its own hard-linked copy in the sandbox's directory, removed with
	// the sandbox, so the caller may drop imageDir (and restore it into other sandboxes) at once.
	mem := filepath.Join(d.dir(spec.ID), "image")
	return d.boot(ctx, spec, func(dir string) error {
		if err := linkTree(filepath.Join(imageDir, ImageMemoryDir), mem); err != nil {
			return fmt.Errorf("checkpoint image: %w", err)
		}
		return sandboxdir.ReadLayerTar(filepath.Join(imageDir, ImageFSFile), filepath.Join(dir, "disk", "upper"))
	}, []string{"restore", "--detach", "--background", "--image-path", mem}, lnk, quiesced)
}

// daemonName is what a daemon binary's file name may be.
var daemonName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// imageDaemon returns the daemon binary to restore the image in imageDir with: the one it names (see
// ImageDaemonFile), found next to current; current for an image that names none (made before images
// did).
func imageDaemon(imageDir, current string) (string, error) {
	f, err := os.Open(filepath.Join(imageDir, ImageDaemonFile))
	if errors.Is(err, os.ErrNotExist) {
		return current, nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 256))
	if err != nil {
		return "", err
	}
	name := strings.TrimSpace(string(b))
	if !daemonName.MatchString(name) {
		return "", fmt.Errorf("the image names its daemon binary %q, not a file name: %w", name, errdefs.ErrInvalidArgument)
	}
	p := filepath.Join(filepath.Dir(current), name)
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("the daemon binary the image was made with (%s) is not on this node: %w", p, errdefs.ErrFailedPrecondition)
	} else if err != nil {
		return "", fmt.Errorf("the daemon binary the image was made with: %w", err)
	}
	return p, nil
}

// initBinary reports the host path of the daemon binary sandbox id runs, from its spec.
func (d *Driver) initBinary(id string) (string, error) {
	spec, err := d.readSpec(id)
	if err != nil {
		return "", err
	}
	if spec.Process != nil && len(spec.Process.Args) > 0 {
		for _, m := range spec.Mounts {
			if m.Destination == spec.Process.Args[0] {
				return m.Source, nil
			}
		}
	}
	return "", fmt.Errorf("spec of %s: no mount of its init binary", id)
}

// linkTree makes dst a copy of the flat directory src, hard-linking its files (copying them when src
// is on another file system).
func linkTree(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	if err := os.Mkdir(dst, 0o700); err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file", e.Name())
		}
		from, to := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		if err := os.Link(from, to); err == nil {
			continue
		}
		if err := sandboxdir.CopyFile(from, to); err != nil {
			return err
		}
	}
	return nil
}

// runscQuiet runs a runsc command and reports its stderr on failure.
func (d *Driver) runscQuiet(ctx context.Context, args ...string) error {
	var errb bytes.Buffer
	cmd := d.runsc(ctx, args...)
	cmd.Stderr = &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if strings.Contains(msg, "does not exist") || strings.Contains(msg, "not found") {
			return fmt.Errorf("runsc %s: %s: %w", args[0], lastLine(msg), errdefs.ErrNotFound)
		}
		return fmt.Errorf("runsc %s: %v: %s", args[0], err, lastLine(msg))
	}
	return nil
}

// lastLine picks the telling line of runsc's stderr: a panic's message, else the first line that says
// what failed (runsc prints its error before any stack trace), else the last line.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for _, l := range lines {
		if strings.HasPrefix(l, "panic: ") {
			return l
		}
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "\t") && (strings.Contains(l, "failed") || strings.Contains(l, "error")) {
			return l
		}
	}
	return lines[len(lines)-1]
}
