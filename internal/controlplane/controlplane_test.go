package controlplane

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/daemon/link"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/gateway"
	"github.com/airlockrun/airlock/internal/gateway/flowlog"
	"github.com/airlockrun/airlock/internal/gateway/policy"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/snapshot"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/sqlite"
)

// fakeNode is a hand-written node that keeps a set of "running" sandbox IDs, and a real flow log.
type fakeNode struct {
	// id names the node; "" is "local".
	id string

	mu sync.Mutex
	// running, failCreate, destroyed and tenants are guarded by mu.
	running    map[string]bool
	failCreate error
	destroyed  []string
	// tenants holds the tenant each sandbox was last created or recovered with.
	tenants map[string]string
	// frozen holds the sandboxes a checkpoint left stopped; restored maps a restored sandbox to the
	// image content it came from; failCheckpoint fails the next checkpoints; cas records CopyCA.
	frozen   map[string]bool
	restored map[string]string
	// newIdentity records CreateRequest.NewIdentity of each restore; guarded by mu.
	newIdentity    map[string]bool
	failCheckpoint error
	// afterCheckpoint runs after each checkpoint that saved an image (without n.mu); onRecover runs at
	// the start of each Recover (without n.mu).
	afterCheckpoint func()
	onRecover       func()
	cas             []string
	// template is the template of the last create.
	template string
	// cpu is the CPU time SandboxCPU reports per sandbox.
	cpu map[string]time.Duration
	// metricsAsked records the SandboxMetrics calls: sandbox ID, start and end.
	metricsAsked []metricsCall
	// root is the template root TemplateRoot reports; checkpoints counts checkpoints, fetched the
	// restores that fetched their image from the snapshot store.
	root        string
	checkpoints int
	fetched     int
	// noFiles makes checkpoints name no file layer, as a driver without one (runtime.ImageFiles).
	noFiles bool
	// bigFile, if set, adds /home/user/big of that many bytes to each checkpoint's layer: the
	// checkpoint's number, as a byte, repeated.
	bigFile int64
	// runtimes, if set, are what Runtimes reports.
	runtimes []nodecontract.Runtime
	// snaps is the snapshot store the node writes and reads images with (nil: none, as a node started
	// without one); images holds its pending and cached images. storeMu serializes storeImage.
	snaps   *snapshot.Store
	images  string
	storeMu sync.Mutex
	// cp is the control plane the node asks for grants and reports its stores to (guarded by mu);
	// storing cancels the store of each snapshot in progress, jobs are those not reported yet, stores
	// tracks the goroutines (store); calls counts the
	// calls of each method of the contract (those that count, by name; guarded by mu).
	cp      *Service
	storing map[string]context.CancelFunc
	jobs    map[string]fakeJob
	stores  sync.WaitGroup
	calls   map[string]int

	flows *flowlog.Log
}

func newFakeNode(t *testing.T) *fakeNode {
	l, err := flowlog.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return &fakeNode{running: map[string]bool{}, tenants: map[string]string{}, frozen: map[string]bool{},
		restored: map[string]string{}, newIdentity: map[string]bool{}, cpu: map[string]time.Duration{}, root: t.TempDir(), flows: l, images: t.TempDir()}
}

func (n *fakeNode) ID() string {
	if n.id != "" {
		return n.id
	}
	return "local"
}

// Runtimes reports the fake's runtimes: gvisor's abilities, and those set in runtimes.
func (n *fakeNode) Runtimes(ctx context.Context) ([]nodecontract.Runtime, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.runtimes != nil {
		return n.runtimes, nil
	}
	return []nodecontract.Runtime{{Name: "gvisor", Abilities: []string{nodecontract.AbilityMemorySnapshots, nodecontract.AbilityFork}}}, nil
}

// CheckTemplate knows the default template and images by digest ("app@sha256:1…" only).
func (n *fakeNode) CheckTemplate(ctx context.Context, name string) error {
	if name != "default" && name != "app@sha256:"+strings.Repeat("1", 64) {
		return errdefs.ErrNotFound
	}
	return nil
}

func (n *fakeNode) lastTemplate() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.template
}

func (n *fakeNode) CreateSandbox(ctx context.Context, req nodecontract.CreateRequest) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.failCreate != nil {
		return n.failCreate
	}
	n.running[req.ID] = true
	n.tenants[req.ID] = req.TenantID
	n.template = req.Template
	return nil
}

func (n *fakeNode) DestroySandbox(ctx context.Context, id string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.running, id)
	n.destroyed = append(n.destroyed, id)
	return nil
}

func (n *fakeNode) Link(ctx context.Context, id string) (*link.Client, error) {
	return nil, errors.New("fake node has no links")
}

func (n *fakeNode) Sandboxes(ctx context.Context) ([]string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var ids []string
	for id := range n.running {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids, nil
}

func (n *fakeNode) Recover(ctx context.Context, reqs []nodecontract.RecoverRequest) ([]string, error) {
	n.mu.Lock()
	hook := n.onRecover
	n.mu.Unlock()
	if hook != nil {
		hook()
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, r := range reqs {
		n.tenants[r.ID] = r.TenantID
		if n.running[r.ID] {
			out = append(out, r.ID)
		}
	}
	return out, nil
}

func (n *fakeNode) SetNetwork(ctx context.Context, id string, p policy.Policy) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.running[id] {
		return errdefs.ErrFailedPrecondition
	}
	return nil
}

func (n *fakeNode) Flows(ctx context.Context, id string, f flowlog.Filter) ([]gateway.Flow, error) {
	return n.flows.Read(ctx, id, f)
}

// TemplateRoot reports the fake template's root, an empty directory per node.
func (n *fakeNode) TemplateRoot(ctx context.Context, name string) (string, error) {
	if err := n.CheckTemplate(ctx, name); err != nil {
		return "", err
	}
	return n.root, nil
}

// SandboxCPU reports the CPU time set for the sandbox with setCPU.
func (n *fakeNode) SandboxCPU(ctx context.Context, id string) (time.Duration, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.running[id] {
		return 0, errdefs.ErrNotFound
	}
	return n.cpu[id], nil
}

// metricsCall is one call of fakeNode.SandboxMetrics.
type metricsCall struct {
	id         string
	start, end time.Time
}

// SandboxMetrics answers two readings of a running sandbox, their memory its ID's length and its
// place among the calls, and records the call.
func (n *fakeNode) SandboxMetrics(ctx context.Context, id string, start, end time.Time) ([]nodecontract.Sample, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.running[id] {
		return nil, fmt.Errorf("sandbox %s is not running: %w", id, errdefs.ErrFailedPrecondition)
	}
	n.metricsAsked = append(n.metricsAsked, metricsCall{id, start, end})
	t := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	return []nodecontract.Sample{{Time: t, CPUCount: 1, MemUsed: 1}, {Time: t.Add(5 * time.Second), CPUCount: 1, MemUsed: int64(len(n.metricsAsked)), DiskUsed: int64(len(id))}}, nil
}

// Snapshot checkpoints as a node does: an image that names the sandbox into the node's pending images,
// on record with the control plane (n.cp) before a destroy, then stored in the background (store).
func (n *fakeNode) Snapshot(ctx context.Context, id string, req nodecontract.SnapshotRequest) (nodecontract.Image, error) {
	n.count("Snapshot")
	if n.snaps == nil {
		return nodecontract.Image{}, fmt.Errorf("fake node %s has no snapshot store: %w", n.ID(), errdefs.ErrFailedPrecondition)
	}
	if err := req.Check(); err != nil {
		return nodecontract.Image{}, err
	}
	dir := n.pendingDir(req.SnapshotID)
	if err := n.checkpoint(id, dir, req.Then == nodecontract.ThenRun); err != nil {
		os.RemoveAll(dir)
		return nodecontract.Image{}, err
	}
	n.mu.Lock()
	after := n.afterCheckpoint
	n.mu.Unlock()
	if after != nil {
		after()
	}
	img := nodecontract.Image{Bytes: 1 << 10, FilesPart: "fs.tar"}
	n.mu.Lock()
	if n.noFiles {
		img.FilesPart = ""
	}
	n.mu.Unlock()
	rep := nodecontract.SnapshotReport{TenantID: req.TenantID, SnapshotID: req.SnapshotID, Image: img}
	err := n.saved(ctx, rep)
	if err != nil && req.Then == nodecontract.ThenDestroy {
		n.mu.Lock()
		delete(n.frozen, id)
		n.mu.Unlock()
		os.RemoveAll(dir)
		return nodecontract.Image{}, fmt.Errorf("put the image on record: %w", err)
	}
	if req.Then == nodecontract.ThenDestroy {
		n.mu.Lock()
		delete(n.running, id)
		delete(n.frozen, id)
		n.mu.Unlock()
	}
	n.store(fakeJob{rep: rep, meta: req.Meta, saved: err == nil})
	return img, nil
}

// bind makes s the control plane the fake asks for grants and reports its stores to.
func (n *fakeNode) bind(s *Service) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cp = s
}

// bound returns the control plane the fake is bound to.
func (n *fakeNode) bound() (*Service, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cp == nil {
		return nil, fmt.Errorf("fake node %s: no control plane: %w", n.ID(), errdefs.ErrUnavailable)
	}
	return n.cp, nil
}

// saved tells the control plane the fake is bound to that rep's image is saved.
func (n *fakeNode) saved(ctx context.Context, rep nodecontract.SnapshotReport) error {
	cp, err := n.bound()
	if err != nil {
		return err
	}
	return cp.NodeSnapshotSaved(ctx, n.ID(), rep)
}

// fakeJob is a snapshot the fake stores: what it reports, the manifest's meta, and whether the
// control plane has it on record.
type fakeJob struct {
	rep   nodecontract.SnapshotReport
	meta  map[string]string
	saved bool
}

// store stores a job's image in the background, as a node does: on record first, then with a grant
// asked for on each try, until it is stored, lost or no longer wanted, and reports it. jobs keeps it
// until it is reported (resumeStores starts those again); stores tracks the goroutines; stopStores
// ends every store; DropImages ends one.
func (n *fakeNode) store(j fakeJob) {
	ctx, cancel := context.WithCancel(context.Background())
	n.mu.Lock()
	if n.storing == nil {
		n.storing, n.jobs = map[string]context.CancelFunc{}, map[string]fakeJob{}
	}
	if prev := n.storing[j.rep.SnapshotID]; prev != nil {
		prev()
	}
	n.storing[j.rep.SnapshotID] = cancel
	n.jobs[j.rep.SnapshotID] = j
	n.mu.Unlock()
	n.stores.Add(1)
	go func() { // owner: the fake; ends when stored, dropped or stopped
		defer n.stores.Done()
		defer cancel()
		for n.storeOnce(ctx, &j) != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
		n.mu.Lock()
		delete(n.jobs, j.rep.SnapshotID)
		n.mu.Unlock()
	}()
}

// storeOnce is one try of store: nil once nothing is left to do.
func (n *fakeNode) storeOnce(ctx context.Context, j *fakeJob) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	cp, err := n.bound()
	if err != nil {
		return err
	}
	rep := j.rep
	if !j.saved {
		if err := cp.NodeSnapshotSaved(ctx, n.ID(), rep); errors.Is(err, errdefs.ErrNotFound) {
			return n.DropImages(ctx, []string{rep.SnapshotID})
		} else if err != nil {
			return err
		}
		j.saved = true
	}
	g, err := cp.NodeSnapshotGrant(ctx, n.ID(), rep.TenantID, rep.SnapshotID)
	if errors.Is(err, errdefs.ErrNotFound) {
		return n.DropImages(ctx, []string{rep.SnapshotID})
	} else if err != nil {
		return err
	}
	t0 := time.Now()
	st, err := n.storeImage(ctx, rep.TenantID, rep.SnapshotID, g, j.meta)
	g.Clear()
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		rep.Lost = "its saved image was lost before it reached the snapshot store"
	case err != nil:
		return err
	default:
		rep.LogicalBytes, rep.NewStoredBytes, rep.StoreMillis = st.LogicalBytes, st.NewStoredBytes, max(1, time.Since(t0).Milliseconds())
	}
	if err := cp.NodeSnapshotStored(ctx, n.ID(), rep); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return err
	}
	return nil
}

// resumeStores starts again the stores of the jobs not reported yet, as a node does when it starts.
func (n *fakeNode) resumeStores() {
	n.mu.Lock()
	var js []fakeJob
	for _, j := range n.jobs {
		js = append(js, j)
	}
	n.mu.Unlock()
	for _, j := range js {
		n.store(j)
	}
}

// stopStores ends the stores in progress (as a node's crash would) and waits for them.
func (n *fakeNode) stopStores() {
	n.mu.Lock()
	for _, cancel := range n.storing {
		cancel()
	}
	n.mu.Unlock()
	n.stores.Wait()
}

// count records a call of the node contract's method.
func (n *fakeNode) count(method string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.calls == nil {
		n.calls = map[string]int{}
	}
	n.calls[method]++
}

func (n *fakeNode) checkpoint(id, imageDir string, leaveRunning bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.running[id] {
		return fmt.Errorf("sandbox %s is not running: %w", id, errdefs.ErrFailedPrecondition)
	}
	if n.failCheckpoint != nil {
		return n.failCheckpoint
	}
	if err := os.MkdirAll(filepath.Join(imageDir, "memory"), 0o700); err != nil {
		return err
	}
	content := "image of " + id
	if prev, ok := n.restored[id]; ok {
		content = prev + " via " + id
	}
	if err := os.WriteFile(filepath.Join(imageDir, "memory", "checkpoint.img"), []byte(content), 0o600); err != nil {
		return err
	}
	// The writable layer: /home/user/note.txt says which image it is.
	n.checkpoints++
	if err := writeFakeLayer(filepath.Join(imageDir, "fs.tar"), fmt.Sprintf("checkpoint %d\n%s\n", n.checkpoints, content), n.bigFile, byte(n.checkpoints)); err != nil {
		return err
	}
	if !leaveRunning {
		n.frozen[id] = true
	}
	return nil
}

// pendingDir is where the fake node keeps the image of snapID until StoreImage; cachedDir after.
func (n *fakeNode) pendingDir(snapID string) string {
	return filepath.Join(n.images, "pending", snapID)
}
func (n *fakeNode) cachedDir(snapID string) string { return filepath.Join(n.images, "cache", snapID) }

// storeImage writes the pending image into the snapshot store with the grant, as a node does.
func (n *fakeNode) storeImage(ctx context.Context, tenantID, snapID string, g *snapshot.Grant, meta map[string]string) (snapshot.Stats, error) {
	if g == nil || g.Tenant() != tenantID {
		return snapshot.Stats{}, fmt.Errorf("no grant for %s: %w", tenantID, errdefs.ErrInvalidArgument)
	}
	n.storeMu.Lock()
	defer n.storeMu.Unlock()
	if m, err := n.snaps.ManifestWith(ctx, g, snapID); err == nil {
		return m.Stats, nil
	}
	dir := n.pendingDir(snapID)
	if _, err := os.Stat(dir); err != nil {
		return snapshot.Stats{}, fmt.Errorf("image of %s: %v: %w", snapID, err, errdefs.ErrNotFound)
	}
	w, err := n.snaps.NewWriterWith(ctx, g, snapID)
	if err != nil {
		return snapshot.Stats{}, err
	}
	defer w.Abort()
	for _, name := range []string{"fs.tar", "memory/checkpoint.img"} {
		f, err := os.Open(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil {
			return snapshot.Stats{}, err
		}
		err = w.AddFile(ctx, name, f)
		f.Close()
		if err != nil {
			return snapshot.Stats{}, err
		}
	}
	m, err := w.Commit(ctx, meta)
	if err != nil {
		return snapshot.Stats{}, err
	}
	os.MkdirAll(filepath.Dir(n.cachedDir(snapID)), 0o700)
	os.RemoveAll(n.cachedDir(snapID))
	if err := os.Rename(dir, n.cachedDir(snapID)); err != nil {
		return snapshot.Stats{}, err
	}
	return m.Stats, nil
}

func (n *fakeNode) DropImages(ctx context.Context, ids []string) error {
	for _, id := range ids {
		n.mu.Lock()
		if cancel := n.storing[id]; cancel != nil {
			cancel()
		}
		n.mu.Unlock()
		os.RemoveAll(n.pendingDir(id))
		os.RemoveAll(n.cachedDir(id))
	}
	return nil
}

// pendingImages lists the images the fake keeps and has not stored.
func (n *fakeNode) pendingImages() ([]string, error) {
	entries, _ := os.ReadDir(filepath.Join(n.images, "pending"))
	var ids []string
	for _, e := range entries {
		ids = append(ids, e.Name())
	}
	return ids, nil
}

// RestoreSandbox reads the image of src: pending or cached here, or fetched with the grant.
func (n *fakeNode) RestoreSandbox(ctx context.Context, req nodecontract.CreateRequest, src nodecontract.ImageSource) error {
	if n.snaps == nil {
		return fmt.Errorf("fake node %s has no snapshot store: %w", n.ID(), errdefs.ErrFailedPrecondition)
	}
	var b []byte
	err := errdefs.ErrNotFound
	for _, d := range []string{n.pendingDir(src.SnapshotID), n.cachedDir(src.SnapshotID)} {
		if b, err = os.ReadFile(filepath.Join(d, "memory", "checkpoint.img")); err == nil {
			break
		}
	}
	if err != nil {
		if src.Grant == nil {
			return fmt.Errorf("no grant to fetch %s: %w", src.SnapshotID, errdefs.ErrInvalidArgument)
		}
		tmp := filepath.Join(n.images, "fetch-"+req.ID)
		defer os.RemoveAll(tmp)
		if err := n.snaps.RestoreWith(ctx, src.Grant, src.SnapshotID, tmp); err != nil {
			return err
		}
		if b, err = os.ReadFile(filepath.Join(tmp, "memory", "checkpoint.img")); err != nil {
			return err
		}
		n.mu.Lock()
		n.fetched++
		n.mu.Unlock()
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.failCreate != nil {
		return n.failCreate
	}
	n.running[req.ID] = true
	n.tenants[req.ID] = req.TenantID
	n.restored[req.ID] = string(b)
	n.newIdentity[req.ID] = req.NewIdentity
	return nil
}

func (n *fakeNode) RewrapCAs(ctx context.Context, tenantID string) (int, error) { return 0, nil }

func (n *fakeNode) CopyCA(ctx context.Context, fromID, toID, tenantID string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cas = append(n.cas, fromID+"->"+toID)
	return nil
}

func (n *fakeNode) ForgetCA(caID string) {}

func (n *fakeNode) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	return nil, fmt.Errorf("fake node has no network: %w", errdefs.ErrPortClosed)
}

func (n *fakeNode) tenantOf(id string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.tenants[id]
}

func (n *fakeNode) isRunning(id string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.running[id]
}

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	// t is guarded by mu.
	t time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newService(t *testing.T, st store.Store, n Node, clk *clock) *Service {
	t.Helper()
	s, err := New(Config{Store: st, Node: n, Now: clk.Now, ReapInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func setup(t *testing.T) (*Service, store.Store, *fakeNode, *clock, string) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	n := newFakeNode(t)
	clk := &clock{t: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	s := newService(t, st, n, clk)
	key, err := s.Bootstrap(ctx)
	if err != nil || key == "" {
		t.Fatalf("Bootstrap = %q, %v; want a key", key, err)
	}
	p, err := s.Authenticate(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	return s, st, n, clk, p.TenantID
}

func TestBootstrapAndAuthenticate(t *testing.T) {
	ctx := context.Background()
	s, _, _, _, tenant := setup(t)
	if tenant == "" {
		t.Fatal("no tenant")
	}
	again, err := s.Bootstrap(ctx)
	if err != nil || again != "" {
		t.Errorf("second Bootstrap = %q, %v; want no new key", again, err)
	}
	for _, key := range []string{"", "ak_wrong", strings.Repeat("x", 5000)} {
		if _, err := s.Authenticate(ctx, key); !errors.Is(err, errdefs.ErrUnauthenticated) {
			t.Errorf("Authenticate(%.10q) = %v; want ErrUnauthenticated", key, err)
		}
	}
}

func TestCreateValidation(t *testing.T) {
	ctx := context.Background()
	s, _, _, _, tenant := setup(t)
	for name, req := range map[string]CreateRequest{
		"cpu too low":       {CPUMillicores: 1},
		"memory too high":   {MemoryMB: 1 << 20},
		"disk too small":    {DiskMB: 1},
		"negative timeout":  {TimeoutSeconds: -1},
		"timeout too long":  {TimeoutSeconds: 86401},
		"bad env name":      {Env: map[string]string{"A=B": "x"}},
		"env NUL":           {Env: map[string]string{"A": "x\x00y"}},
		"bad template name": {Template: "../../etc"},
		"bad metadata key":  {Metadata: map[string]string{"": "x"}},
		"long metadata val": {Metadata: map[string]string{"k": strings.Repeat("v", 600)}},
	} {
		if _, err := s.CreateSandbox(ctx, tenant, req); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: CreateSandbox = %v; want ErrInvalidArgument", name, err)
		}
	}
}

func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	s, _, n, clk, tenant := setup(t)
	sb, err := s.CreateSandbox(ctx, tenant, CreateRequest{TimeoutSeconds: 60, Metadata: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != store.StateRunning || sb.EndsAt == nil || !sb.EndsAt.Equal(clk.Now().Add(time.Minute)) {
		t.Fatalf("created %+v; want running, ending in 60s", sb)
	}
	if !n.isRunning(sb.ID) {
		t.Fatal("node does not run the sandbox")
	}
	// Extend, then let it expire.
	sb, err = s.SetTimeout(ctx, tenant, sb.ID, 120)
	if err != nil || !sb.EndsAt.Equal(clk.Now().Add(2*time.Minute)) {
		t.Fatalf("SetTimeout = %+v, %v", sb, err)
	}
	clk.Add(time.Minute)
	s.reapExpired()
	if got, _ := s.GetSandbox(ctx, tenant, sb.ID); got.State != store.StateRunning {
		t.Fatalf("after 1 of 2 minutes state = %s; want running", got.State)
	}
	clk.Add(time.Minute)
	s.reapExpired()
	got, err := s.GetSandbox(ctx, tenant, sb.ID)
	if err != nil || got.State != store.StateStopped || got.Reason != "timeout" {
		t.Fatalf("after timeout: %+v, %v; want stopped by timeout", got, err)
	}
	if n.isRunning(sb.ID) {
		t.Error("node still runs the timed-out sandbox")
	}
	if _, err := s.SetTimeout(ctx, tenant, sb.ID, 60); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("SetTimeout on a stopped sandbox = %v; want ErrFailedPrecondition", err)
	}
	if err := s.DeleteSandbox(ctx, tenant, sb.ID); err != nil {
		t.Errorf("Delete of a stopped sandbox = %v; want nil", err)
	}
	if _, err := s.link(ctx, tenant, sb.ID); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Link to a stopped sandbox = %v; want ErrFailedPrecondition", err)
	}
	if _, err := s.GetSandbox(ctx, "tn_other", sb.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get from another tenant = %v; want ErrNotFound", err)
	}
}

func TestCreateFailureIsRecorded(t *testing.T) {
	ctx := context.Background()
	s, _, n, _, tenant := setup(t)
	n.failCreate = errors.New("runsc exploded")
	sb, err := s.CreateSandbox(ctx, tenant, CreateRequest{})
	if err == nil || sb.State != store.StateFailed || sb.Reason == "" {
		t.Fatalf("CreateSandbox = %+v, %v; want a failed record with a reason and an error", sb, err)
	}
}

func TestExitMarksFailed(t *testing.T) {
	ctx := context.Background()
	s, _, n, _, tenant := setup(t)
	sb, err := s.CreateSandbox(ctx, tenant, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	s.HandleSandboxExit(sb.ID, "out of memory (limit 512 MiB)")
	got, _ := s.GetSandbox(ctx, tenant, sb.ID)
	if got.State != store.StateFailed || got.Reason != "out of memory (limit 512 MiB)" || got.StoppedAt == nil {
		t.Fatalf("after exit: %+v; want failed with the reason", got)
	}
	if n.isRunning(sb.ID) {
		t.Error("failed sandbox not cleaned up on the node")
	}
	// Deleting it afterwards keeps the reason.
	if err := s.DeleteSandbox(ctx, tenant, sb.ID); err != nil {
		t.Fatal(err)
	}
	got, _ = s.GetSandbox(ctx, tenant, sb.ID)
	if got.State != store.StateStopped || got.Reason != "out of memory (limit 512 MiB)" {
		t.Errorf("after delete: %+v; want stopped keeping the failure reason", got)
	}
}

func TestReconcileAfterRestart(t *testing.T) {
	ctx := context.Background()
	s, st, n, clk, tenant := setup(t)
	alive, err := s.CreateSandbox(ctx, tenant, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	lost, err := s.CreateSandbox(ctx, tenant, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// A crash: the node lost one sandbox, and one orphan sits on the node that the store never heard of.
	n.mu.Lock()
	delete(n.running, lost.ID)
	n.running["sb_orphanorphanorphanorphanor"] = true
	n.mu.Unlock()

	n.mu.Lock()
	n.tenants = map[string]string{}
	n.mu.Unlock()
	s2 := newService(t, st, n, clk)
	if err := s2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s2.Shutdown(ctx)
	if got, _ := s2.GetSandbox(ctx, tenant, alive.ID); got.State != store.StateRunning {
		t.Errorf("re-adopted sandbox is %s; want running", got.State)
	}
	if got := n.tenantOf(alive.ID); got != tenant {
		t.Errorf("recovered with tenant %q; want %q", got, tenant)
	}
	if got, _ := s2.GetSandbox(ctx, tenant, lost.ID); got.State != store.StateFailed || !strings.Contains(got.Reason, "lost") {
		t.Errorf("lost sandbox is %s (%q); want failed, lost", got.State, got.Reason)
	}
	if n.isRunning("sb_orphanorphanorphanorphanor") {
		t.Error("orphan not destroyed")
	}
}

// TestReconcileKeepsSandboxesCreatedMeanwhile: a sandbox created on the node while a restarted control
// plane settles it (as the resume of a session whose sandbox the node lost is) is no orphan: it stays
// running, on the node.
func TestReconcileKeepsSandboxesCreatedMeanwhile(t *testing.T) {
	ctx := context.Background()
	s, st, n, clk, tenant := setup(t)
	var meanwhile store.Sandbox
	n.mu.Lock()
	n.onRecover = func() {
		n.mu.Lock()
		n.onRecover = nil
		n.mu.Unlock()
		sb, err := s.CreateSandbox(ctx, tenant, CreateRequest{})
		if err != nil {
			t.Error(err)
		}
		meanwhile = sb
	}
	n.mu.Unlock()
	s2 := newService(t, st, n, clk)
	if err := s2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s2.Shutdown(ctx)
	if meanwhile.ID == "" {
		t.Fatal("no sandbox was created during the reconcile")
	}
	if got, _ := s2.GetSandbox(ctx, tenant, meanwhile.ID); got.State != store.StateRunning || !n.isRunning(meanwhile.ID) {
		t.Errorf("sandbox created during the reconcile: %s, on the node %v; want running there", got.State, n.isRunning(meanwhile.ID))
	}
}

func TestShutdownStopsEverything(t *testing.T) {
	ctx := context.Background()
	s, _, n, _, tenant := setup(t)
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := 0; i < 3; i++ {
		sb, err := s.CreateSandbox(ctx, tenant, CreateRequest{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
	}
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		got, _ := s.GetSandbox(ctx, tenant, id)
		if got.State != store.StateStopped || n.isRunning(id) {
			t.Errorf("%s after shutdown: %s, on node %v; want stopped and gone", id, got.State, n.isRunning(id))
		}
	}
}

func TestConcurrentDeletesAreSerialized(t *testing.T) {
	ctx := context.Background()
	s, _, _, _, tenant := setup(t)
	sb, err := s.CreateSandbox(ctx, tenant, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.DeleteSandbox(ctx, tenant, sb.ID)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent delete: %v", err)
		}
	}
}

// TestEgress: a tenant reads its sandbox's flows, filtered, also once the sandbox stopped; another
// tenant cannot; the node learns the sandbox's tenant at create.
func TestEgress(t *testing.T) {
	ctx := context.Background()
	s, st, n, clk, tenant := setup(t)
	sb, err := s.CreateSandbox(ctx, tenant, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := n.tenantOf(sb.ID); got != tenant {
		t.Errorf("node got tenant %q; want %q", got, tenant)
	}
	t0 := clk.Now()
	for i, d := range []string{gateway.DecisionAllow, gateway.DecisionDeny, gateway.DecisionAllow} {
		at := t0.Add(time.Duration(i) * time.Second)
		n.flows.Record(gateway.Flow{Start: at, End: at, SandboxID: sb.ID, TenantID: tenant, Decision: d, Host: fmt.Sprintf("h%d.example", i)})
	}
	hosts := func(fs []gateway.Flow) []string {
		var out []string
		for _, f := range fs {
			out = append(out, f.Host)
		}
		return out
	}
	got, err := s.Egress(ctx, tenant, sb.ID, flowlog.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"h2.example", "h1.example", "h0.example"}, hosts(got)); diff != "" {
		t.Errorf("Egress (-want +got):\n%s", diff)
	}
	got, err = s.Egress(ctx, tenant, sb.ID, flowlog.Filter{Decision: gateway.DecisionDeny})
	if err != nil || len(got) != 1 || got[0].Host != "h1.example" {
		t.Errorf("Egress(deny) = %v, %v; want h1.example", hosts(got), err)
	}
	if _, err := s.Egress(ctx, tenant, sb.ID, flowlog.Filter{Decision: "maybe"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Egress(decision maybe) = %v; want ErrInvalidArgument", err)
	}
	other, err := st.CreateTenant(ctx, store.Tenant{Name: "other"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Egress(ctx, other.ID, sb.ID, flowlog.Filter{}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Egress from another tenant = %v; want ErrNotFound", err)
	}
	if err := s.DeleteSandbox(ctx, tenant, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Egress(ctx, tenant, sb.ID, flowlog.Filter{Limit: 2}); err != nil || len(got) != 2 {
		t.Errorf("Egress of a stopped sandbox = %v, %v; want its 2 newest flows", hosts(got), err)
	}
}

// writeFakeLayer writes a writable-layer archive holding /home/user/note.txt with note and, if big > 0,
// /home/user/big: big bytes of fill.
func writeFakeLayer(path, note string, big int64, fill byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	hdrs := []*tar.Header{
		{Name: "home/", Typeflag: tar.TypeDir, Mode: 0o755, Format: tar.FormatPAX},
		{Name: "home/user/", Typeflag: tar.TypeDir, Mode: 0o755, Format: tar.FormatPAX},
		{Name: "home/user/note.txt", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(note)), Format: tar.FormatPAX},
	}
	if big > 0 {
		hdrs = append(hdrs, &tar.Header{Name: "home/user/big", Typeflag: tar.TypeReg, Mode: 0o644, Size: big, Format: tar.FormatPAX})
	}
	for _, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			f.Close()
			return err
		}
		body := io.Reader(strings.NewReader(note))
		if h.Name == "home/user/big" {
			body = bytes.NewReader(bytes.Repeat([]byte{fill}, int(big)))
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := io.Copy(tw, body); err != nil {
				f.Close()
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
