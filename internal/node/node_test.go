package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/blob"
	"github.com/airlockrun/airlock/internal/blob/local"
	"github.com/airlockrun/airlock/internal/daemon/link"
	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
	keyslocal "github.com/airlockrun/airlock/internal/keys/local"
	"github.com/airlockrun/airlock/internal/node"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/runtime"
	"github.com/airlockrun/airlock/internal/runtime/fake"
	"github.com/airlockrun/airlock/internal/snapshot"
	"github.com/airlockrun/airlock/internal/template"
)

// templates is a registry of one template, the default, with an empty root.
type templates struct{ root string }

func (r templates) Get(ctx context.Context, name string) (template.Template, error) {
	if !template.IsDefault(name) {
		return template.Template{}, fmt.Errorf("template %q: %w", name, errdefs.ErrNotFound)
	}
	return template.Template{Name: template.DefaultName, RootFS: r.root, Env: []string{"FROM_TEMPLATE=t"}}, nil
}

func (r templates) List(ctx context.Context) ([]string, error) {
	return []string{template.DefaultName}, nil
}

// exit is one call of Config.OnExit.
type exit struct{ id, reason string }

// calls is the control plane's side of the node's background stores (nodecontract.SnapshotCalls): it
// hands out grants from the control plane's keyed snapshot store and records the reports.
type calls struct {
	cp *snapshot.Store

	mu sync.Mutex
	// savedErr, grantErr and storedErr, while set, are answered instead of taking the word that an
	// image is saved, a grant, or taking a report.
	savedErr, grantErr, storedErr error
	// saved are the words taken that an image is saved.
	saved  []nodecontract.SnapshotReport
	grants int
	// grantEntered, if set, is sent to when a grant is asked for, which then waits until grantGate
	// closes.
	grantEntered chan struct{}
	grantGate    chan struct{}
	reports      []nodecontract.SnapshotReport
	// reported receives each report taken.
	reported chan nodecontract.SnapshotReport
}

func (c *calls) SnapshotSaved(ctx context.Context, rep nodecontract.SnapshotReport) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.savedErr != nil {
		return c.savedErr
	}
	c.saved = append(c.saved, rep)
	return nil
}

func (c *calls) SnapshotGrant(ctx context.Context, tenantID, snapshotID string) (*snapshot.Grant, error) {
	c.mu.Lock()
	err := c.grantErr
	c.grants++
	entered, gate := c.grantEntered, c.grantGate
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if gate != nil {
		entered <- struct{}{}
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return c.cp.Grant(ctx, tenantID, true)
}

func (c *calls) SnapshotStored(ctx context.Context, rep nodecontract.SnapshotReport) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.storedErr != nil {
		return c.storedErr
	}
	c.reports = append(c.reports, rep)
	select {
	case c.reported <- rep:
	default:
	}
	return nil
}

func (c *calls) set(grantErr, storedErr error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.grantErr, c.storedErr = grantErr, storedErr
}

func (c *calls) setSaved(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.savedErr = err
}

// savedOf returns the words taken that the image of snapID is saved.
func (c *calls) savedOf(snapID string) []nodecontract.SnapshotReport {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []nodecontract.SnapshotReport
	for _, r := range c.saved {
		if r.SnapshotID == snapID {
			out = append(out, r)
		}
	}
	return out
}

// taken returns the reports taken so far.
func (c *calls) taken() []nodecontract.SnapshotReport {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]nodecontract.SnapshotReport(nil), c.reports...)
}

// env is a node over the fake driver, with a snapshot store over a local blob store, and the control
// plane's store (with a real keyring) that makes the grants.
type env struct {
	cfg   node.Config
	n     *node.Local
	d     *fake.Driver
	cp    *snapshot.Store
	calls *calls
	// blobs is the blob store the node writes into; broken, while set, fails its writes.
	blobs *flakyBlobs
	exits chan exit
	// state is the driver's state directory.
	state string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the node makes a network namespace for every sandbox, which needs root")
	}
	dir := t.TempDir()
	d, err := fake.New(fake.Config{StateDir: filepath.Join(dir, "driver")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	inner, err := local.New(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	blobs := &flakyBlobs{Store: inner}
	keyring, err := keyslocal.New(filepath.Join(dir, "keys"))
	if err != nil {
		t.Fatal(err)
	}
	cp, err := snapshot.New(snapshot.Config{Blobs: blobs, Keys: keyring})
	if err != nil {
		t.Fatal(err)
	}
	nodeStore, err := snapshot.New(snapshot.Config{Blobs: blobs})
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "template")
	bin := filepath.Join(dir, "airlock-daemon")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte("a daemon binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	e := &env{d: d, cp: cp, blobs: blobs, calls: &calls{cp: cp, reported: make(chan nodecontract.SnapshotReport, 16)},
		exits: make(chan exit, 16), state: filepath.Join(dir, "driver")}
	e.cfg = node.Config{
		DataDir:       filepath.Join(dir, "node"),
		Driver:        d,
		Templates:     templates{root: root},
		DaemonBinary:  bin,
		Snapshots:     nodeStore,
		SnapshotCalls: e.calls,
		OnExit: func(id, reason string) {
			select {
			case e.exits <- exit{id, reason}:
			default:
				t.Errorf("OnExit(%s, %q): too many exits", id, reason)
			}
		},
		Logger: slog.New(slog.DiscardHandler),
	}
	e.n = e.newNode(t)
	// Whatever a test left running goes before the driver closes (cleanups run last first): the node
	// unmounts the sandboxes' network namespaces.
	t.Cleanup(func() {
		ctx := context.Background()
		ids, _ := e.n.Sandboxes(ctx)
		for _, id := range ids {
			if err := e.n.DestroySandbox(ctx, id); err != nil {
				t.Errorf("destroy %s: %v", id, err)
			}
		}
		e.n.Shutdown(ctx)
	})
	return e
}

// newNode makes a node over the env's data directory and driver.
func (e *env) newNode(t *testing.T) *node.Local {
	t.Helper()
	n, err := node.New(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	node.SetStoreBackoff(n, 10*time.Millisecond, 100*time.Millisecond)
	return n
}

// flakyBlobs is a blob store whose writes fail while broken is set.
type flakyBlobs struct {
	blob.Store
	broken atomic.Bool
}

func (f *flakyBlobs) Put(ctx context.Context, key string, data []byte) error {
	if f.broken.Load() {
		return errors.New("blob store unreachable")
	}
	return f.Store.Put(ctx, key, data)
}

// snapshot has the node snapshot sandbox id as snapID of tn_1, then run on or be destroyed.
func (e *env) snapshot(t *testing.T, ctx context.Context, id, snapID string, then nodecontract.Then) (nodecontract.Image, error) {
	t.Helper()
	return e.n.Snapshot(ctx, id, nodecontract.SnapshotRequest{TenantID: "tn_1", SnapshotID: snapID, Then: then})
}

// snapshotWaiting snapshots a new sandbox sb_1 as sn_1 of tn_1 while the blob store is broken: its store
// waits, its image pending, until the test mends the blob store.
func (e *env) snapshotWaiting(t *testing.T, then nodecontract.Then) nodecontract.Image {
	t.Helper()
	e.blobs.broken.Store(true)
	e.create(t, "sb_1")
	img, err := e.snapshot(t, t.Context(), "sb_1", "sn_1", then)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// waitReport waits for the report of snapID.
func (e *env) waitReport(t *testing.T, snapID string) nodecontract.SnapshotReport {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		for _, r := range e.calls.taken() {
			if r.SnapshotID == snapID {
				return r
			}
		}
		select {
		case <-e.calls.reported:
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			t.Fatalf("no report of %s", snapID)
		}
	}
}

// waitStoresDone waits until the node runs no store.
func (e *env) waitStoresDone(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for node.StoresRunning(e.n) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d stores still run", node.StoresRunning(e.n))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (e *env) create(t *testing.T, id string, reqEnv ...string) {
	t.Helper()
	if err := e.n.CreateSandbox(t.Context(), nodecontract.CreateRequest{ID: id, TenantID: "tn_1", Template: "default", Env: reqEnv}); err != nil {
		t.Fatalf("CreateSandbox(%s): %v", id, err)
	}
}

// sh runs script in sandbox id through the node's link and returns its trimmed stdout.
func (e *env) sh(t *testing.T, id, script string) string {
	t.Helper()
	cl, err := e.n.Link(t.Context(), id)
	if err != nil {
		t.Fatalf("Link(%s): %v", id, err)
	}
	res, err := cl.Exec(t.Context(), proto.ExecRequest{Argv: []string{"sh", "-c", script}})
	if err != nil {
		t.Fatalf("%s: %q: %v", id, script, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("%s: %q: exit %d: %s", id, script, res.ExitCode, res.Stderr)
	}
	return strings.TrimSpace(string(res.Stdout))
}

func (e *env) info(t *testing.T, id string) fake.Info {
	t.Helper()
	info, err := e.d.Info(id)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func (e *env) grant(t *testing.T, tenant string) *snapshot.Grant {
	t.Helper()
	g, err := e.cp.Grant(t.Context(), tenant, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Clear)
	return g
}

// leftovers lists what the driver's state directory and the node's netns directory hold.
func (e *env) leftovers(t *testing.T) []string {
	t.Helper()
	var left []string
	for _, dir := range []string{filepath.Join(e.cfg.DataDir, "netns"), filepath.Join(e.state, "sandboxes")} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, de := range entries {
			left = append(left, filepath.Join(dir, de.Name()))
		}
	}
	return left
}

// noExit fails the test if OnExit was called.
func (e *env) noExit(t *testing.T) {
	t.Helper()
	select {
	case x := <-e.exits:
		t.Errorf("OnExit(%s, %q) for a sandbox that did not stop by itself", x.id, x.reason)
	default:
	}
}

// waitExit waits for OnExit.
func (e *env) waitExit(t *testing.T) exit {
	t.Helper()
	select {
	case x := <-e.exits:
		return x
	case <-time.After(10 * time.Second):
		t.Fatal("OnExit was not called")
		return exit{}
	}
}

// TestCreateExecDestroy: a created sandbox gets the template's and the request's environment, its own
// network namespace, the pinned daemon binary and the node's init; commands run through its link; a
// second create of its ID is refused; destroy leaves nothing of it, and of an unknown ID succeeds.
func TestCreateExecDestroy(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.create(t, "sb_1", "FROM_REQUEST=r")
	if got := e.sh(t, "sb_1", `echo "$FROM_TEMPLATE$FROM_REQUEST"`); got != "tr" {
		t.Errorf("exec prints %q; want the template's and the request's environment", got)
	}
	spec := e.info(t, "sb_1").Spec
	if want := filepath.Join(e.cfg.DataDir, "netns", "sb_1"); spec.NetNS != want {
		t.Errorf("the sandbox's network namespace is %q; want %q", spec.NetNS, want)
	}
	if !cmp.Equal(spec.Init, node.InitArgs()) || spec.ControlDir != node.ControlDir {
		t.Errorf("init %q, control directory %q; want %q, %q", spec.Init, spec.ControlDir, node.InitArgs(), node.ControlDir)
	}
	if filepath.Dir(spec.InitBinary) != filepath.Join(e.cfg.DataDir, "daemons") {
		t.Errorf("the sandbox runs the daemon binary %s; want the node's pinned copy", spec.InitBinary)
	}
	if ids, err := e.n.Sandboxes(ctx); err != nil || !slices.Equal(ids, []string{"sb_1"}) {
		t.Errorf("Sandboxes = %v, %v; want [sb_1]", ids, err)
	}

	err := e.n.CreateSandbox(ctx, nodecontract.CreateRequest{ID: "sb_1", TenantID: "tn_1", Template: "default"})
	if !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("a second CreateSandbox(sb_1) = %v; want already exists", err)
	}
	if got := e.sh(t, "sb_1", "echo still"); got != "still" {
		t.Errorf("after the refused create: %q", got)
	}
	if err := e.n.CreateSandbox(ctx, nodecontract.CreateRequest{ID: "sb_2", TenantID: "tn_1", Template: "nope"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("CreateSandbox of an unknown template = %v; want not found", err)
	}

	if err := e.n.DestroySandbox(ctx, "sb_1"); err != nil {
		t.Fatal(err)
	}
	if left := e.leftovers(t); len(left) != 0 {
		t.Errorf("destroy left %v", left)
	}
	if _, err := e.n.Link(ctx, "sb_1"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Link of a destroyed sandbox = %v; want failed precondition", err)
	}
	if ids, err := e.n.Sandboxes(ctx); err != nil || len(ids) != 0 {
		t.Errorf("Sandboxes after destroy = %v, %v", ids, err)
	}
	if _, err := os.Stat(e.n.AuditPath("sb_1")); err != nil {
		t.Errorf("the audit log does not outlive the sandbox: %v", err)
	}
	// The channel log records the frames (the exec above among them), never their arguments: a command
	// line is the tenant's, sealed in its own audit log.
	if raw, err := os.ReadFile(e.n.AuditPath("sb_1")); err != nil || !bytes.Contains(raw, []byte(`"op":"exec"`)) {
		t.Errorf("the channel log has no exec request (%v):\n%.2000s", err, raw)
	} else if bytes.Contains(raw, []byte("echo still")) {
		t.Errorf("the channel log holds a command line:\n%.2000s", raw)
	}
	for _, id := range []string{"sb_1", "sb_never"} {
		if err := e.n.DestroySandbox(ctx, id); err != nil {
			t.Errorf("DestroySandbox(%s) = %v; want success", id, err)
		}
	}
	e.noExit(t)
}

// TestFailedCreateLeavesNothing: a create that fails in the driver, or after it (the daemon cannot be
// reached), leaves no sandbox, network namespace or registration behind, and the ID can be used again.
func TestFailedCreateLeavesNothing(t *testing.T) {
	e := newEnv(t)
	boom := errors.New("boom")
	for _, op := range []fake.Op{fake.OpCreate, fake.OpDialLink} {
		t.Run(string(op), func(t *testing.T) {
			e.d.Fail(op, boom)
			// The node retries dialing until its ctx ends.
			ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			err := e.n.CreateSandbox(ctx, nodecontract.CreateRequest{ID: "sb_1", TenantID: "tn_1", Template: "default"})
			cancel()
			e.d.Fail(op, nil)
			if err == nil {
				t.Fatal("CreateSandbox succeeded")
			}
			if left := e.leftovers(t); len(left) != 0 {
				t.Errorf("a failed create left %v", left)
			}
			if _, err := e.n.Link(t.Context(), "sb_1"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
				t.Errorf("Link after a failed create = %v; want failed precondition", err)
			}
			e.create(t, "sb_1")
			e.sh(t, "sb_1", "true")
			if err := e.n.DestroySandbox(t.Context(), "sb_1"); err != nil {
				t.Fatal(err)
			}
		})
	}
	e.noExit(t)
}

// TestOnExit: a sandbox that stops by itself is reported through OnExit with the runtime's reason; one
// the node destroys is not.
func TestOnExit(t *testing.T) {
	e := newEnv(t)
	e.create(t, "sb_1")
	e.create(t, "sb_2")
	const reason = "out of memory (limit 512 MiB)"
	if err := e.d.Exit("sb_1", reason); err != nil {
		t.Fatal(err)
	}
	if x := e.waitExit(t); x != (exit{"sb_1", reason}) {
		t.Errorf("OnExit(%s, %q); want (sb_1, %q)", x.id, x.reason, reason)
	}
	if err := e.n.DestroySandbox(t.Context(), "sb_2"); err != nil {
		t.Fatal(err)
	}
	if err := e.n.DestroySandbox(t.Context(), "sb_1"); err != nil {
		t.Fatal(err)
	}
	if left := e.leftovers(t); len(left) != 0 {
		t.Errorf("destroy left %v", left)
	}
	select {
	case x := <-e.exits:
		t.Errorf("OnExit(%s, %q) after the node destroyed it", x.id, x.reason)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestCheckpointStoreRestore: a snapshot that leaves the sandbox running and one that destroys it (a
// pause) are stored by the node in the background, with the grants it asks for, and reported with
// their statistics; a restore uses the image the node keeps, and, once the node dropped it, fetches it
// from the blob store with a grant; each restored sandbox has its image's files and reports it.
func TestCheckpointStoreRestore(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.blobs.broken.Store(true) // the stores wait: the images stay pending until the test looks
	e.create(t, "sb_1", "FROM_REQUEST=r")
	e.sh(t, "sb_1", "echo one > f")

	img, err := e.n.Snapshot(ctx, "sb_1", nodecontract.SnapshotRequest{TenantID: "tn_1", SnapshotID: "sn_1", Then: nodecontract.ThenRun,
		Meta: map[string]string{"session": "se_1"}})
	if err != nil {
		t.Fatal(err)
	}
	if img.Bytes == 0 || img.FilesPart != fake.ImageFSFile {
		t.Errorf("Snapshot = %+v; want a size and the files part %q", img, fake.ImageFSFile)
	}
	// Running on, and linked again.
	if info := e.info(t, "sb_1"); info.Status != (runtime.Status{Running: true}) || info.Checkpoints != 1 {
		t.Errorf("after a snapshot that leaves it running: %+v", info)
	}
	e.sh(t, "sb_1", "echo two > f")

	paused, err := e.snapshot(t, ctx, "sb_1", "sn_2", nodecontract.ThenDestroy)
	if err != nil {
		t.Fatal(err)
	}
	// Each image was on record before its snapshot answered.
	for id, want := range map[string]nodecontract.Image{"sn_1": img, "sn_2": paused} {
		if got := e.calls.savedOf(id); len(got) != 1 || !cmp.Equal(got[0], nodecontract.SnapshotReport{TenantID: "tn_1", SnapshotID: id, Image: want}) {
			t.Errorf("said saved of %s: %+v; want once, with its image %+v", id, got, want)
		}
	}
	// Torn down behind the answer.
	waitUntil(t, func() error {
		if _, err := e.d.Info("sb_1"); !errors.Is(err, errdefs.ErrNotFound) {
			return fmt.Errorf("after a snapshot that destroys it, the driver has sb_1: %v", err)
		}
		return nil
	})
	if ids := node.PendingImages(e.n); !slices.Equal(ids, []string{"sn_1", "sn_2"}) {
		t.Errorf("PendingImages = %v; want [sn_1 sn_2]", ids)
	}

	e.blobs.broken.Store(false)
	for id, want := range map[string]nodecontract.Image{"sn_1": img, "sn_2": paused} {
		rep := e.waitReport(t, id)
		if rep.TenantID != "tn_1" || rep.Image != want || rep.LogicalBytes == 0 || rep.NewStoredBytes == 0 || rep.Lost != "" {
			t.Errorf("report of %s: %+v; want tn_1's, stored, with the image %+v", id, rep, want)
		}
	}
	e.waitStoresDone(t)
	if ids := node.PendingImages(e.n); len(ids) != 0 {
		t.Errorf("pending after the stores: %v", ids)
	}
	if jobs := node.StoreJobs(e.n); len(jobs) != 0 {
		t.Errorf("jobs left after the stores: %v", jobs)
	}
	// The control plane reads what the node stored, with the meta it was given.
	var rec bytes.Buffer
	if err := e.cp.ReadFile(ctx, "tn_1", "sn_2", fake.ImageFile, &rec); err != nil {
		t.Fatal(err)
	}
	var stored fake.Image
	if err := json.Unmarshal(rec.Bytes(), &stored); err != nil || stored.ID != "sb_1" || stored.Checkpoint != 2 {
		t.Errorf("the stored image records %+v, %v; want sb_1's second checkpoint", stored, err)
	}
	if m, err := e.cp.Manifest(ctx, "tn_1", "sn_1"); err != nil || m.Meta["session"] != "se_1" {
		t.Errorf("sn_1's manifest: meta %v, %v; want the snapshot's", m.Meta, err)
	}

	g := e.grant(t, "tn_1")
	restore := func(id, snap string, g *snapshot.Grant) error {
		return e.n.RestoreSandbox(ctx, nodecontract.CreateRequest{ID: id, TenantID: "tn_1", Template: "default"}, nodecontract.ImageSource{SnapshotID: snap, Grant: g})
	}
	// From the image the node keeps: no grant needed.
	if err := restore("sb_2", "sn_1", nil); err != nil {
		t.Fatal(err)
	}
	want := fake.Image{ID: "sb_1", Env: []string{"FROM_TEMPLATE=t", "FROM_REQUEST=r"}, Checkpoint: 1}
	if got := e.info(t, "sb_2").RestoredFrom; got == nil || !cmp.Equal(*got, want) {
		t.Errorf("sb_2 restored from %+v; want %+v", got, want)
	}
	if got := e.sh(t, "sb_2", `cat f; echo "$FROM_REQUEST"`); got != "one\nr" {
		t.Errorf("sb_2: %q; want the first image's file and environment", got)
	}

	// Dropped from the node: fetched from the blob store, with a grant only.
	if err := e.n.DropImages(ctx, []string{"sn_1", "sn_2"}); err != nil {
		t.Fatal(err)
	}
	if err := restore("sb_3", "sn_2", nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a restore of a dropped image without a grant = %v; want invalid argument", err)
	}
	if err := restore("sb_3", "sn_2", g); err != nil {
		t.Fatal(err)
	}
	if got := e.info(t, "sb_3").RestoredFrom; got == nil || got.ID != "sb_1" || got.Checkpoint != 2 {
		t.Errorf("sb_3 restored from %+v; want sb_1's second checkpoint", got)
	}
	if got := e.sh(t, "sb_3", "cat f"); got != "two" {
		t.Errorf("sb_3's file holds %q; want the second image's", got)
	}
	if err := restore("sb_3", "sn_2", g); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("a restore into a running ID = %v; want already exists", err)
	}
	for _, id := range []string{"sb_1", "sb_2", "sb_3"} {
		if err := e.n.DestroySandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if left := e.leftovers(t); len(left) != 0 {
		t.Errorf("destroy left %v", left)
	}
	if n := len(e.calls.taken()); n != 2 {
		t.Errorf("%d reports; want one per snapshot", n)
	}
	e.noExit(t)
}

// TestPauseImageNamesFilesPart: the image of a snapshot that destroys the sandbox names its files part
// too, as that of one that leaves it running does: the control plane records it to read the snapshot's
// files.
func TestPauseImageNamesFilesPart(t *testing.T) {
	e := newEnv(t)
	e.create(t, "sb_1")
	img, err := e.snapshot(t, t.Context(), "sb_1", "sn_1", nodecontract.ThenDestroy)
	if err != nil {
		t.Fatal(err)
	}
	if img.FilesPart != fake.ImageFSFile {
		t.Errorf("Snapshot then destroy reports %+v, without the files part %q", img, fake.ImageFSFile)
	}
}

// TestFailedCheckpointRunsOn: a snapshot whose checkpoint fails leaves the sandbox running (the node
// unpauses it) and linked, whatever was to become of it, keeps no image nor job, and reports no exit.
func TestFailedCheckpointRunsOn(t *testing.T) {
	e := newEnv(t)
	boom := errors.New("boom")
	for i, then := range []nodecontract.Then{nodecontract.ThenRun, nodecontract.ThenDestroy} {
		t.Run(fmt.Sprintf("Then=%s", then), func(t *testing.T) {
			ctx := t.Context()
			id := fmt.Sprintf("sb_%d", i)
			e.create(t, id)
			e.d.Fail(fake.OpCheckpoint, boom)
			_, err := e.snapshot(t, ctx, id, "sn_"+id, then)
			e.d.Fail(fake.OpCheckpoint, nil)
			if !errors.Is(err, boom) {
				t.Fatalf("Snapshot = %v; want the driver's error", err)
			}
			info := e.info(t, id)
			if info.Status != (runtime.Status{Running: true}) || !info.Listening || info.Unpauses != 1 {
				t.Errorf("after a failed checkpoint: %+v; want running, listening, unpaused once", info)
			}
			if got := e.sh(t, id, "echo alive"); got != "alive" {
				t.Errorf("after a failed checkpoint: %q", got)
			}
			if ids := node.PendingImages(e.n); len(ids) != 0 {
				t.Errorf("a failed checkpoint left pending images %v", ids)
			}
			if jobs := node.StoreJobs(e.n); len(jobs) != 0 {
				t.Errorf("a failed checkpoint left store jobs %v", jobs)
			}
		})
	}
	e.noExit(t)
}

// TestCheckpointOutlivesItsCaller: a snapshot whose caller went away (its context canceled, as when a
// control plane dies mid-request) runs to its end, its store with it, and the sandbox runs on.
func TestCheckpointOutlivesItsCaller(t *testing.T) {
	e := newEnv(t)
	e.blobs.broken.Store(true)
	e.create(t, "sb_1")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	img, err := e.snapshot(t, ctx, "sb_1", "sn_1", nodecontract.ThenRun)
	if err != nil || img.Bytes == 0 {
		t.Fatalf("Snapshot with its caller gone = %+v, %v; want it done", img, err)
	}
	if got := e.sh(t, "sb_1", "echo alive"); got != "alive" {
		t.Errorf("after the checkpoint: %q", got)
	}
	if ids := node.PendingImages(e.n); len(ids) != 1 || ids[0] != "sn_1" {
		t.Errorf("pending images %v; want sn_1's", ids)
	}
	e.blobs.broken.Store(false)
	if rep := e.waitReport(t, "sn_1"); rep.Lost != "" || rep.LogicalBytes == 0 {
		t.Errorf("report of a snapshot whose caller went away: %+v; want it stored", rep)
	}
	e.noExit(t)
}

// TestSnapshotThen: a snapshot then run leaves the sandbox running, linked and watched; one then destroy
// leaves nothing of it on the host, and does not report it as exited; a request without a tenant,
// snapshot or a known Then is refused before anything is taken.
func TestSnapshotThen(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.create(t, "sb_1")
	e.create(t, "sb_2")
	if _, err := e.snapshot(t, ctx, "sb_1", "sn_1", nodecontract.ThenRun); err != nil {
		t.Fatal(err)
	}
	if info := e.info(t, "sb_1"); info.Status != (runtime.Status{Running: true}) || !info.Listening {
		t.Errorf("after a snapshot then run: %+v; want running and listening", info)
	}
	if got := e.sh(t, "sb_1", "echo alive"); got != "alive" {
		t.Errorf("after a snapshot then run: %q", got)
	}
	if _, err := e.snapshot(t, ctx, "sb_2", "sn_2", nodecontract.ThenDestroy); err != nil {
		t.Fatal(err)
	}
	// Unreachable at once; torn down behind the answer.
	if _, err := e.n.Link(ctx, "sb_2"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Link to a sandbox a snapshot destroyed = %v; want failed precondition", err)
	}
	waitUntil(t, func() error {
		if ids, err := e.n.Sandboxes(ctx); err != nil || !slices.Equal(ids, []string{"sb_1"}) {
			return fmt.Errorf("Sandboxes after a snapshot then destroy = %v, %v; want [sb_1]", ids, err)
		}
		return nil
	})
	for _, id := range []string{"sn_1", "sn_2"} {
		if rep := e.waitReport(t, id); rep.Lost != "" {
			t.Errorf("report of %s: %+v", id, rep)
		}
	}
	if err := e.n.DestroySandbox(ctx, "sb_1"); err != nil {
		t.Fatal(err)
	}
	if left := e.leftovers(t); len(left) != 0 {
		t.Errorf("left %v", left)
	}
	// The driver's sandbox of sb_2 went with the snapshot; its watcher did not count that as an exit.
	time.Sleep(2500 * time.Millisecond)
	e.noExit(t)

	e.create(t, "sb_3")
	for _, req := range []nodecontract.SnapshotRequest{
		{SnapshotID: "sn_3", Then: nodecontract.ThenRun},
		{TenantID: "tn_1", Then: nodecontract.ThenRun},
		{TenantID: "tn_1", SnapshotID: "sn_3"},
		{TenantID: "tn_1", SnapshotID: "sn_3", Then: "pause"},
		{TenantID: "tn_1", SnapshotID: "../sn_3", Then: nodecontract.ThenRun},
	} {
		if _, err := e.n.Snapshot(ctx, "sb_3", req); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Snapshot(%+v) = %v; want invalid argument", req, err)
		}
	}
	if info := e.info(t, "sb_3"); info.Checkpoints != 0 {
		t.Errorf("refused snapshots checkpointed sb_3 %d times", info.Checkpoints)
	}
}

// TestSnapshotWithoutCalls: a node that cannot ask the control plane for grants takes no snapshot.
func TestSnapshotWithoutCalls(t *testing.T) {
	e := newEnv(t)
	e.n.Shutdown(t.Context())
	e.cfg.SnapshotCalls = nil
	e.n = e.newNode(t)
	e.create(t, "sb_1")
	if _, err := e.snapshot(t, t.Context(), "sb_1", "sn_1", nodecontract.ThenRun); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Snapshot without SnapshotCalls = %v; want failed precondition", err)
	}
	if info := e.info(t, "sb_1"); info.Checkpoints != 0 {
		t.Errorf("checkpointed %d times", info.Checkpoints)
	}
}

// TestStoreRetries: a store that fails while the blob store is broken, and a report the control plane
// cannot take, are tried again until they succeed; the snapshot is reported once, and nothing is left
// of the store.
func TestStoreRetries(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.snapshotWaiting(t, nodecontract.ThenDestroy)
	// Several tries fail (grants are asked for each).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		e.calls.mu.Lock()
		n := e.calls.grants
		e.calls.mu.Unlock()
		if n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d tries while the blob store is broken; want it tried again", n)
		}
	}
	if reps := e.calls.taken(); len(reps) != 0 || node.StoresRunning(e.n) != 1 {
		t.Fatalf("reports %+v and %d stores while the blob store is broken; want none and one", reps, node.StoresRunning(e.n))
	}
	e.calls.set(fmt.Errorf("no replica reachable: %w", errdefs.ErrUnavailable), fmt.Errorf("no replica reachable: %w", errdefs.ErrUnavailable))
	e.blobs.broken.Store(false)
	time.Sleep(300 * time.Millisecond)
	if reps := e.calls.taken(); len(reps) != 0 || node.StoresRunning(e.n) != 1 {
		t.Fatalf("reports %+v and %d stores while the control plane is away; want none and one", reps, node.StoresRunning(e.n))
	}
	e.calls.set(nil, nil)
	rep := e.waitReport(t, "sn_1")
	e.waitStoresDone(t)
	if rep.Lost != "" || rep.LogicalBytes == 0 || rep.NewStoredBytes == 0 {
		t.Errorf("report %+v; want stored", rep)
	}
	if reps := e.calls.taken(); len(reps) != 1 {
		t.Errorf("%d reports; want one", len(reps))
	}
	if jobs := node.StoreJobs(e.n); len(jobs) != 0 {
		t.Errorf("jobs left: %v", jobs)
	}
	if _, err := e.cp.Manifest(ctx, "tn_1", "sn_1"); err != nil {
		t.Errorf("the stored snapshot: %v", err)
	}
}

// heldStore pauses a new sandbox sb as snapshot sn and returns once the image's store is in progress,
// held at its grant until the returned gate is closed.
func (e *env) heldStore(t *testing.T, sb, sn string) (gate chan struct{}) {
	t.Helper()
	entered := make(chan struct{}, 1)
	gate = make(chan struct{})
	e.calls.mu.Lock()
	e.calls.grantEntered, e.calls.grantGate = entered, gate
	e.calls.mu.Unlock()
	e.create(t, sb)
	if _, err := e.snapshot(t, t.Context(), sb, sn, nodecontract.ThenDestroy); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the store did not start")
	}
	return gate
}

// waitUntil calls ok every 20 ms until it returns nil, and fails t with its last error if that takes
// longer than 10 s.
func waitUntil(t *testing.T, ok func() error) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err := ok()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
}

// TestShutdownFinishesStores: a clean shutdown lets a store in progress finish (a paused session's
// image reaches the snapshot store, for another node to resume it) before it returns.
func TestShutdownFinishesStores(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	gate := e.heldStore(t, "sb_1", "sn_1")
	shut := make(chan error, 1)
	go func() { shut <- e.n.Shutdown(ctx) }()
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) while a store was in progress", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(gate)
	select {
	case err := <-shut:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Shutdown did not return once the store could finish")
	}
	if reps := e.calls.taken(); len(reps) != 1 || reps[0].Lost != "" || reps[0].LogicalBytes == 0 {
		t.Errorf("reports %+v; want the snapshot stored, once", reps)
	}
	if _, err := e.cp.Manifest(ctx, "tn_1", "sn_1"); err != nil {
		t.Errorf("the stored snapshot: %v", err)
	}
	if jobs := node.StoreJobs(e.n); len(jobs) != 0 {
		t.Errorf("jobs left: %v", jobs)
	}
}

// TestShutdownCutsStores: a store that cannot finish before Shutdown's deadline is cut off, and that
// is no error: its job stays for the next start, and nothing is reported of it.
func TestShutdownCutsStores(t *testing.T) {
	e := newEnv(t)
	defer close(e.heldStore(t, "sb_1", "sn_1"))
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if err := e.n.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown with a store cut off = %v; want nil", err)
	}
	if jobs := node.StoreJobs(e.n); !slices.Equal(jobs, []string{"sn_1"}) {
		t.Errorf("jobs left: %v; want sn_1's, for the next start", jobs)
	}
	if reps := e.calls.taken(); len(reps) != 0 {
		t.Errorf("reports %+v; want none (the image is neither stored nor lost)", reps)
	}
}

// TestStoreAfterRestart: a node made again on the same data directory (a restart of the node, or of
// the whole process) takes up the stores the previous one left unfinished, removes an image no store
// waits for, and reports an image gone from its disk as lost.
func TestStoreAfterRestart(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.blobs.broken.Store(true)
	for _, id := range []string{"sb_1", "sb_2"} {
		e.create(t, id)
		if _, err := e.snapshot(t, ctx, id, "sn_"+id, nodecontract.ThenDestroy); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.n.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if n := node.StoresRunning(e.n); n != 0 {
		t.Fatalf("%d stores run after Shutdown", n)
	}
	os.RemoveAll(node.PendingDir(e.n, "sn_sb_2")) // the disk lost one image
	stray := node.PendingDir(e.n, "sn_stray")     // a checkpoint the crash cut off
	if err := os.MkdirAll(stray, 0o700); err != nil {
		t.Fatal(err)
	}
	if reps := e.calls.taken(); len(reps) != 0 {
		t.Fatalf("reports before the restart: %+v", reps)
	}
	e.blobs.broken.Store(false)
	e.n = e.newNode(t)
	if rep := e.waitReport(t, "sn_sb_1"); rep.Lost != "" || rep.LogicalBytes == 0 || rep.Image.Bytes == 0 {
		t.Errorf("report of the image saved before the restart: %+v; want it stored, with its image", rep)
	}
	if got := e.calls.savedOf("sn_sb_1"); len(got) != 2 || got[1] != got[0] {
		t.Errorf("said saved of sn_sb_1: %+v; want it said again, alike, after the restart", got)
	}
	if rep := e.waitReport(t, "sn_sb_2"); rep.Lost == "" || !strings.Contains(rep.Lost, "lost") || rep.Image.Bytes == 0 {
		t.Errorf("report of the image lost before the restart: %+v; want lost", rep)
	}
	e.waitStoresDone(t)
	if _, err := os.Stat(stray); !os.IsNotExist(err) {
		t.Errorf("stray pending image kept: %v", err)
	}
	if ids, jobs := node.PendingImages(e.n), node.StoreJobs(e.n); len(ids) != 0 || len(jobs) != 0 {
		t.Errorf("left: images %v, jobs %v", ids, jobs)
	}
	if _, err := e.cp.Manifest(ctx, "tn_1", "sn_sb_1"); err != nil {
		t.Errorf("the stored snapshot: %v", err)
	}
}

// TestStoreNotWanted: a snapshot the control plane no longer waits for (ErrNotFound to the grant, or
// to the report) has its image and its job dropped, and is asked about no more.
func TestStoreNotWanted(t *testing.T) {
	for _, tc := range []struct {
		name              string
		grantErr, repErr  error
		wantStoredInStore bool
	}{
		{name: "grant", grantErr: fmt.Errorf("snapshot deleted: %w", errdefs.ErrNotFound)},
		{name: "report", repErr: fmt.Errorf("snapshot deleted: %w", errdefs.ErrNotFound), wantStoredInStore: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := t.Context()
			e.calls.set(tc.grantErr, tc.repErr)
			e.create(t, "sb_1")
			if _, err := e.snapshot(t, ctx, "sb_1", "sn_1", nodecontract.ThenRun); err != nil {
				t.Fatal(err)
			}
			e.waitStoresDone(t)
			e.calls.mu.Lock()
			grants := e.calls.grants
			e.calls.mu.Unlock()
			if grants != 1 {
				t.Errorf("%d grants asked for; want 1", grants)
			}
			if ids, jobs := node.PendingImages(e.n), node.StoreJobs(e.n); len(ids) != 0 || len(jobs) != 0 {
				t.Errorf("left: images %v, jobs %v", ids, jobs)
			}
			if err := e.n.RestoreSandbox(ctx, nodecontract.CreateRequest{ID: "sb_2", TenantID: "tn_1", Template: "default"}, nodecontract.ImageSource{SnapshotID: "sn_1"}); err == nil {
				t.Error("a restore used the image of a snapshot nobody waits for")
			}
			_, err := e.cp.Manifest(ctx, "tn_1", "sn_1")
			if stored := err == nil; stored != tc.wantStoredInStore {
				t.Errorf("in the snapshot store: %v; want %v", err, tc.wantStoredInStore)
			}
			time.Sleep(200 * time.Millisecond)
			e.calls.mu.Lock()
			grants = e.calls.grants
			e.calls.mu.Unlock()
			if grants != 1 {
				t.Errorf("%d grants asked for; want it not tried again", grants)
			}
		})
	}
}

// TestStoreImageLost: a store whose saved image disappeared (the disk lost it) before it was stored
// reports the snapshot lost, once, instead of trying forever.
func TestStoreImageLost(t *testing.T) {
	e := newEnv(t)
	img := e.snapshotWaiting(t, nodecontract.ThenRun)
	if err := os.RemoveAll(node.PendingDir(e.n, "sn_1")); err != nil {
		t.Fatal(err)
	}
	e.blobs.broken.Store(false)
	rep := e.waitReport(t, "sn_1")
	e.waitStoresDone(t)
	want := nodecontract.SnapshotReport{TenantID: "tn_1", SnapshotID: "sn_1", Image: img, Lost: "its saved image was lost before it reached the snapshot store"}
	if diff := cmp.Diff(want, rep); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	if reps := e.calls.taken(); len(reps) != 1 {
		t.Errorf("%d reports; want one", len(reps))
	}
	if jobs := node.StoreJobs(e.n); len(jobs) != 0 {
		t.Errorf("jobs left: %v", jobs)
	}
}

// TestDropImagesStopsStore: DropImages while a store runs stops it and leaves nothing of it: no image,
// no job, no report, nothing in the snapshot store.
func TestDropImagesStopsStore(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.snapshotWaiting(t, nodecontract.ThenDestroy)
	if n := node.StoresRunning(e.n); n != 1 {
		t.Fatalf("%d stores run; want one", n)
	}
	if err := e.n.DropImages(ctx, []string{"sn_1"}); err != nil {
		t.Fatal(err)
	}
	if n := node.StoresRunning(e.n); n != 0 {
		t.Errorf("%d stores run after DropImages", n)
	}
	e.blobs.broken.Store(false)
	time.Sleep(300 * time.Millisecond)
	if ids, jobs := node.PendingImages(e.n), node.StoreJobs(e.n); len(ids) != 0 || len(jobs) != 0 {
		t.Errorf("left: images %v, jobs %v", ids, jobs)
	}
	if reps := e.calls.taken(); len(reps) != 0 {
		t.Errorf("reports after DropImages: %+v", reps)
	}
	if _, err := e.cp.Manifest(ctx, "tn_1", "sn_1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("in the snapshot store after DropImages: %v; want not found", err)
	}
	// A restarted node finds nothing to take up.
	if err := e.n.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	e.n = e.newNode(t)
	if n := node.StoresRunning(e.n); n != 0 {
		t.Errorf("%d stores after a restart", n)
	}
}

// TestSnapshotSaved: a snapshot then destroy whose image the control plane cannot take on record
// (unreachable, or waiting for no such snapshot) fails and leaves the sandbox running, with no image,
// job or store; one then run answers all the same, and its store says it again before it stores.
func TestSnapshotSaved(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	for i, err := range []error{fmt.Errorf("no replica: %w", errdefs.ErrUnavailable), fmt.Errorf("no such snapshot: %w", errdefs.ErrNotFound)} {
		id := fmt.Sprintf("sb_%d", i)
		e.create(t, id)
		e.calls.setSaved(err)
		_, serr := e.snapshot(t, ctx, id, "sn_"+id, nodecontract.ThenDestroy)
		if !errors.Is(serr, err) {
			t.Errorf("Snapshot then destroy, not taken on record = %v; want %v", serr, err)
		}
		info := e.info(t, id)
		if info.Status != (runtime.Status{Running: true}) || !info.Listening || info.Unpauses != 1 {
			t.Errorf("after it: %+v; want running, listening, unpaused once", info)
		}
		if got := e.sh(t, id, "echo alive"); got != "alive" {
			t.Errorf("after it: %q", got)
		}
		if ids, jobs := node.PendingImages(e.n), node.StoreJobs(e.n); len(ids) != 0 || len(jobs) != 0 || node.StoresRunning(e.n) != 0 {
			t.Errorf("after it: images %v, jobs %v, %d stores; want none", ids, jobs, node.StoresRunning(e.n))
		}
	}

	e.calls.setSaved(fmt.Errorf("no replica: %w", errdefs.ErrUnavailable))
	img, err := e.snapshot(t, ctx, "sb_0", "sn_run", nodecontract.ThenRun)
	if err != nil {
		t.Fatalf("Snapshot then run, not taken on record = %v; want it done", err)
	}
	time.Sleep(100 * time.Millisecond)
	e.calls.mu.Lock()
	grants := e.calls.grants
	e.calls.mu.Unlock()
	if grants != 0 {
		t.Errorf("%d grants asked for before the image was on record", grants)
	}
	e.calls.setSaved(nil)
	rep := e.waitReport(t, "sn_run")
	if rep.Lost != "" || rep.Image != img {
		t.Errorf("report %+v; want stored", rep)
	}
	if got := e.calls.savedOf("sn_run"); len(got) != 1 || got[0].Image != img {
		t.Errorf("said saved: %+v; want once, by the store", got)
	}
	e.noExit(t)
}

// TestRecover: a node made again on the same data directory and driver re-adopts the sandboxes that
// still run (a paused one included, which it lets run), skips those that stopped or never were, and
// watches the adopted ones again.
func TestRecover(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	for _, id := range []string{"sb_1", "sb_2", "sb_3"} {
		e.create(t, id)
	}
	e.sh(t, "sb_1", "echo kept > f")
	if err := e.n.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// A snapshot the node's end cut off midway leaves sb_3 frozen, its daemon quiesced.
	conn, key, err := e.d.DialLink(ctx, "sb_3")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := link.Connect(ctx, conn, link.Options{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	if err := e.d.Checkpoint(ctx, "sb_3", filepath.Join(t.TempDir(), "image"), runtime.CheckpointOptions{}); err != nil {
		t.Fatal(err)
	}
	if st := e.info(t, "sb_3").Status; st != (runtime.Status{Running: true, Paused: true}) {
		t.Fatalf("sb_3 after a checkpoint that leaves it frozen: %+v", st)
	}
	if err := e.n.CreateSandbox(ctx, nodecontract.CreateRequest{ID: "sb_4", TenantID: "tn_1", Template: "default"}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("CreateSandbox after Shutdown = %v; want unavailable", err)
	}
	// While no node watches, sb_2 dies.
	if err := e.d.Exit("sb_2", "sandbox exited"); err != nil {
		t.Fatal(err)
	}

	e.n = e.newNode(t)
	if ids, err := e.n.Sandboxes(ctx); err != nil || !slices.Equal(ids, []string{"sb_1", "sb_2", "sb_3"}) {
		t.Errorf("Sandboxes on the new node = %v, %v", ids, err)
	}
	var reqs []nodecontract.RecoverRequest
	for _, id := range []string{"sb_1", "sb_2", "sb_3", "sb_9"} {
		reqs = append(reqs, nodecontract.RecoverRequest{ID: id, TenantID: "tn_1", Limits: nodecontract.Limits{CPUMillis: 2500}})
	}
	adopted, err := e.n.Recover(ctx, reqs)
	if err != nil || !slices.Equal(adopted, []string{"sb_1", "sb_3"}) {
		t.Fatalf("Recover = %v, %v; want [sb_1 sb_3]", adopted, err)
	}
	// Its metrics count the CPUs of the limits the request gave.
	if ss, err := e.n.SandboxMetrics(ctx, "sb_3", time.Time{}, time.Time{}); err != nil || len(ss) != 1 || ss[0].CPUCount != 3 {
		t.Errorf("the metrics of the adopted sb_3: %+v, %v; want one reading of 3 CPUs", ss, err)
	}
	if got := e.sh(t, "sb_1", "cat f"); got != "kept" {
		t.Errorf("sb_1 after Recover: %q", got)
	}
	if info := e.info(t, "sb_3"); info.Status != (runtime.Status{Running: true}) {
		t.Errorf("the paused sb_3 after Recover: %+v; want running", info.Status)
	}
	e.sh(t, "sb_3", "true")
	// The new node watches what it adopted.
	if err := e.d.Exit("sb_1", "gone"); err != nil {
		t.Fatal(err)
	}
	if x := e.waitExit(t); x != (exit{"sb_1", "gone"}) {
		t.Errorf("OnExit(%s, %q); want (sb_1, gone)", x.id, x.reason)
	}
	for _, id := range []string{"sb_1", "sb_2", "sb_3"} {
		if err := e.n.DestroySandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if left := e.leftovers(t); len(left) != 0 {
		t.Errorf("destroy left %v", left)
	}
	e.noExit(t)
}

// TestRecoverRunning: a Recover of a sandbox the node runs already (another control plane reconciling
// the node) leaves it linked and watched, and does not report it as exited.
func TestRecoverRunning(t *testing.T) {
	e := newEnv(t)
	e.create(t, "sb_1")
	adopted, err := e.n.Recover(t.Context(), []nodecontract.RecoverRequest{{ID: "sb_1", TenantID: "tn_1"}})
	if err != nil || !slices.Equal(adopted, []string{"sb_1"}) {
		t.Fatalf("Recover = %v, %v; want [sb_1]", adopted, err)
	}
	// The node's watcher waits 2 s for the runtime's word before it counts a lost link as an exit.
	select {
	case x := <-e.exits:
		t.Errorf("Recover of a sandbox the node runs reported OnExit(%s, %q) for it", x.id, x.reason)
	case <-time.After(3 * time.Second):
	}
	e.sh(t, "sb_1", "true")
}

// TestFencing: the node refuses a sandbox of a session whose fencing token is smaller than the largest
// it has seen for the session; an equal or larger one, another session's, or none is accepted.
func TestFencing(t *testing.T) {
	e := newEnv(t)
	for i, tc := range []struct {
		caid  string
		fence int64
		ok    bool
	}{
		{"se_1", 5, true},
		{"se_1", 4, false}, // a control plane whose lease was taken over
		{"se_1", 5, true},
		{"se_1", 7, true},
		{"se_1", 6, false},
		{"se_1", 0, true}, // no token: not fenced
		{"se_2", 1, true}, // another session has its own
		{"", 3, true},     // no session: not fenced
	} {
		id := fmt.Sprintf("sb_%d", i)
		err := e.n.CreateSandbox(t.Context(), nodecontract.CreateRequest{ID: id, TenantID: "tn_1", Template: "default", CAID: tc.caid, Fence: tc.fence})
		switch {
		case tc.ok && err != nil:
			t.Errorf("%d: CreateSandbox(%s, session %q, fence %d) = %v; want success", i, id, tc.caid, tc.fence, err)
		case !tc.ok && !errors.Is(err, errdefs.ErrConflict):
			t.Errorf("%d: CreateSandbox(%s, session %q, fence %d) = %v; want conflict", i, id, tc.caid, tc.fence, err)
		}
		if !tc.ok {
			if _, err := e.d.Info(id); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("%d: a refused sandbox reached the driver: %v", i, err)
			}
		}
	}
}

// TestIdentity: a sandbox gets an identity of its own at boot (the identity file, the machine ID); a
// restore of its session's own snapshot keeps it, and a restore that is not (a fork's) gets another.
func TestIdentity(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.create(t, "sb_1")
	read := func(id string) proto.IdentityFileContents {
		t.Helper()
		var c proto.IdentityFileContents
		raw := e.sh(t, id, "cat etc/airlock/identity")
		if err := json.Unmarshal([]byte(raw), &c); err != nil || len(c.InterpreterKey) != 2*proto.InterpreterKeySize || len(c.Epoch) != 2*proto.IdentityEpochSize {
			t.Fatalf("%s's identity file: %q, %v", id, raw, err)
		}
		if mid := e.sh(t, id, "cat etc/machine-id"); mid != c.MachineID {
			t.Errorf("%s's machine ID %q; want the identity's %q", id, mid, c.MachineID)
		}
		return c
	}
	first := read("sb_1")
	if first.Hostname != "sb_1" {
		t.Errorf("the identity's host name %q; want the sandbox's ID", first.Hostname)
	}
	if _, err := e.snapshot(t, ctx, "sb_1", "sn_1", nodecontract.ThenRun); err != nil {
		t.Fatal(err)
	}
	restore := func(id string, fresh bool) {
		t.Helper()
		err := e.n.RestoreSandbox(ctx, nodecontract.CreateRequest{ID: id, TenantID: "tn_1", Template: "default", NewIdentity: fresh}, nodecontract.ImageSource{SnapshotID: "sn_1"})
		if err != nil {
			t.Fatal(err)
		}
	}
	restore("sb_own", false)
	if got := read("sb_own"); got != first {
		t.Errorf("a resume of the session's own snapshot: identity %+v; want the one it had, %+v", got, first)
	}
	restore("sb_fork", true)
	fork := read("sb_fork")
	if fork.Epoch == first.Epoch || fork.InterpreterKey == first.InterpreterKey || fork.Seed == first.Seed || fork.MachineID == first.MachineID || fork.Hostname != "sb_fork" {
		t.Errorf("a fork's identity %+v; want all of it its own, not %+v", fork, first)
	}
}
