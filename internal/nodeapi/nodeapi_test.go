package nodeapi_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/cluster"
	"github.com/airlockrun/airlock/internal/daemon"
	"github.com/airlockrun/airlock/internal/daemon/link"
	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/gateway"
	"github.com/airlockrun/airlock/internal/gateway/flowlog"
	"github.com/airlockrun/airlock/internal/gateway/policy"
	"github.com/airlockrun/airlock/internal/httperr"
	"github.com/airlockrun/airlock/internal/keys/master"
	"github.com/airlockrun/airlock/internal/nodeapi"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/snapshot"
	"github.com/airlockrun/airlock/internal/store/sqlite/sqlitetest"
)

// fakeNode is a Backend that records calls; its sandboxes' daemon is a real one, in this process.
type fakeNode struct {
	t      testing.TB
	socket string // the daemon's socket
	echo   string // address of an echo server standing for a sandbox's port

	mu    sync.Mutex
	calls []string
	link  *link.Client
}

func (f *fakeNode) record(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

func (f *fakeNode) ID() string { return "node-a" }
func (f *fakeNode) CheckTemplate(_ context.Context, name string) error {
	if name != "default" {
		return fmt.Errorf("template %q: %w", name, errdefs.ErrNotFound)
	}
	return nil
}
func (f *fakeNode) TemplateRoot(context.Context, string) (string, error) { return "/", nil }
func (f *fakeNode) CreateSandbox(_ context.Context, req nodecontract.CreateRequest) error {
	f.record("create %s %s %s %d %v", req.ID, req.TenantID, req.Template, req.Limits.MemoryBytes, req.Network.PublicPorts)
	return nil
}
func (f *fakeNode) DestroySandbox(_ context.Context, id string) error {
	f.record("destroy %s", id)
	return nil
}
func (f *fakeNode) Link(ctx context.Context, id string) (*link.Client, error) {
	if id != "sb_1" {
		return nil, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrFailedPrecondition)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.link == nil || f.link.Err() != nil {
		l, err := link.Dial(ctx, f.socket, link.Options{Shared: true})
		if err != nil {
			return nil, err
		}
		f.link = l
		f.t.Cleanup(func() { l.Close() })
	}
	return f.link, nil
}
func (f *fakeNode) LinkMux(ctx context.Context, id string) (*link.Mux, error) {
	l, err := f.Link(ctx, id)
	if err != nil {
		return nil, err
	}
	return l.Mux(), nil
}
func (f *fakeNode) Sandboxes(context.Context) ([]string, error) { return []string{"sb_1", "sb_2"}, nil }
func (f *fakeNode) Recover(_ context.Context, sbs []nodecontract.RecoverRequest) ([]string, error) {
	var ids []string
	for _, s := range sbs {
		if s.ID == "sb_1" {
			ids = append(ids, s.ID)
		}
		if s.ID == "sb_err" {
			return nil, fmt.Errorf("the runtime did not answer: %w", errdefs.ErrUnavailable)
		}
	}
	return ids, nil
}
func (f *fakeNode) SetNetwork(_ context.Context, id string, p policy.Policy) error {
	f.record("network %s %s", id, p.Default)
	return nil
}
func (f *fakeNode) RestoreSandbox(_ context.Context, req nodecontract.CreateRequest, src nodecontract.ImageSource) error {
	f.record("restore %s %d rules from %s with %s", req.ID, len(req.Network.Rules), src.SnapshotID, grantOf(src.Grant))
	return nil
}
func (f *fakeNode) Snapshot(_ context.Context, id string, req nodecontract.SnapshotRequest) (nodecontract.Image, error) {
	if id != "sb_1" {
		return nodecontract.Image{}, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrFailedPrecondition)
	}
	f.record("snapshot %s %s %s %s %s", id, req.TenantID, req.SnapshotID, req.Then, req.Meta["session"])
	// As a node does: the control planes' channels are dropped (with IfIdle, only while nothing is in
	// progress), and the next Link makes a new one.
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.link != nil {
		if !f.link.Mux().DropOthers(req.IfIdle) {
			return nodecontract.Image{}, fmt.Errorf("sandbox %s: %w", id, nodecontract.ErrBusy)
		}
		old := f.link
		f.link = nil
		time.AfterFunc(50*time.Millisecond, func() { old.Close() })
	}
	return nodecontract.Image{Bytes: 3 << 20, Runtime: "gvisor", FilesPart: "fs.tar"}, nil
}
func (f *fakeNode) DropImages(_ context.Context, ids []string) error {
	f.record("drop %s", strings.Join(ids, ","))
	return nil
}
func (f *fakeNode) Runtimes(context.Context) ([]nodecontract.Runtime, error) {
	return []nodecontract.Runtime{{Name: "gvisor", Abilities: []string{nodecontract.AbilityMemorySnapshots, nodecontract.AbilityFork}}, {Name: "runc", Abilities: []string{nodecontract.AbilityFilesSnapshots}}}, nil
}

// grantOf describes a grant as the node received it: its tenant and its keys' first bytes.
func grantOf(g *snapshot.Grant) string {
	if g == nil {
		return "no grant"
	}
	b, err := g.MarshalBinary()
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("grant %s %x", g.Tenant(), b[:4])
}
func (f *fakeNode) CopyCA(_ context.Context, from, to, tenant string) error {
	f.record("copy-ca %s %s %s", from, to, tenant)
	return nil
}
func (f *fakeNode) ForgetCA(id string) { f.record("forget-ca %s", id) }
func (f *fakeNode) RewrapCAs(_ context.Context, tenant string) (int, error) {
	f.record("rewrap %s", tenant)
	return 3, nil
}
func (f *fakeNode) SandboxCPU(context.Context, string) (time.Duration, error) {
	return 1500 * time.Millisecond, nil
}

// SandboxMetrics answers a sample at each bound given, so that the test sees them arrive.
func (f *fakeNode) SandboxMetrics(_ context.Context, id string, start, end time.Time) ([]nodecontract.Sample, error) {
	if id != "sb_1" {
		return nil, fmt.Errorf("sandbox %s is not running: %w", id, errdefs.ErrFailedPrecondition)
	}
	out := []nodecontract.Sample{}
	for _, t := range []time.Time{start, end} {
		if !t.IsZero() {
			out = append(out, nodecontract.Sample{Time: t, CPUCount: 2, CPUUsedPct: 12.5, MemUsed: 1 << 20, MemTotal: 256 << 20, DiskTotal: 1 << 30})
		}
	}
	return out, nil
}
func (f *fakeNode) Flows(_ context.Context, id string, fl flowlog.Filter) ([]gateway.Flow, error) {
	return []gateway.Flow{{SandboxID: id, Host: fl.Host, Decision: gateway.DecisionDeny}}, nil
}
func (f *fakeNode) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	if port != 8080 {
		return nil, fmt.Errorf("port %d: %w", port, errdefs.ErrPortClosed)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", f.echo)
}

// testCluster is a CA with certificates for a control plane and the node.
type testCluster struct {
	ca       *cluster.CA
	cp, node tls.Certificate
}

func newCluster(t testing.TB) testCluster {
	t.Helper()
	mk, err := master.New(bytes.Repeat([]byte{7}, master.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := cluster.LoadCA(t.Context(), sqlitetest.Open(t), mk)
	if err != nil {
		t.Fatal(err)
	}
	c := testCluster{ca: ca}
	if c.cp, err = ca.IssueTLS(cluster.Identity{Role: cluster.RoleControlPlane, ID: "cp-1"}, []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	if c.node, err = ca.IssueTLS(cluster.Identity{Role: cluster.RoleNode, ID: "node-a"}, []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	return c
}

// serve serves h over TLS with cfg, HTTP/2 and HTTP/1.1, until the test ends.
func serve(t testing.TB, h http.Handler, cfg *tls.Config) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = cfg
	srv.TLS.NextProtos = []string{"h2", "http/1.1"}
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "https://")
}

func startDaemon(t testing.TB) string {
	dir, err := os.MkdirTemp("", "nodeapi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "d.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	name := "me"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- daemon.Serve(ctx, ln, daemon.Config{DefaultUser: daemon.User{Name: name, UID: os.Getuid(), GID: os.Getgid(), Home: t.TempDir()}}, nil)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return socket
}

func startEcho(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// setup serves a fakeNode's API and returns a control plane's client of it.
func setup(t testing.TB) (*fakeNode, *nodeapi.Client, testCluster, string) {
	t.Helper()
	tc := newCluster(t)
	fn := &fakeNode{t: t, socket: startDaemon(t), echo: startEcho(t)}
	h, err := nodeapi.NewHandler(fn, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, h, cluster.ServerTLS(tc.node, tc.ca.Pool(), cluster.RoleControlPlane))
	c, err := nodeapi.NewClient(nodeapi.ClientConfig{NodeID: "node-a", Addr: addr, Cert: tc.cp, Roots: tc.ca.Pool()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return fn, c, tc, addr
}

// TestCalls: every call reaches the node with its arguments, and the answers and errors come back,
// errors with their kind.
func TestCalls(t *testing.T) {
	fn, c, _, _ := setup(t)
	ctx := t.Context()
	if err := c.CheckTemplate(ctx, "default"); err != nil {
		t.Fatal(err)
	}
	if err := c.CheckTemplate(ctx, "nope"); !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("CheckTemplate(nope) = %v; want not found naming it", err)
	}
	req := nodecontract.CreateRequest{ID: "sb_1", TenantID: "tn_1", Template: "default", Network: policy.Policy{PublicPorts: []int{8080}}}
	req.Limits.MemoryBytes = 256 << 20
	if err := c.CreateSandbox(ctx, req); err != nil {
		t.Fatal(err)
	}
	ids, err := c.Sandboxes(ctx)
	if err != nil || len(ids) != 2 {
		t.Errorf("Sandboxes = %v, %v", ids, err)
	}
	if got, err := c.Recover(ctx, []nodecontract.RecoverRequest{{ID: "sb_1"}, {ID: "sb_9"}}); err != nil || len(got) != 1 || got[0] != "sb_1" {
		t.Errorf("Recover = %v, %v; want [sb_1]", got, err)
	}
	if got, err := c.Recover(ctx, nil); err != nil || len(got) != 0 {
		t.Errorf("Recover(nil) = %v, %v", got, err)
	}
	if _, err := c.Recover(ctx, []nodecontract.RecoverRequest{{ID: "sb_err"}}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Recover on a node that cannot tell = %v; want unavailable", err)
	}
	if err := c.SetNetwork(ctx, "sb_1", policy.Policy{Default: "allow"}); err != nil {
		t.Fatal(err)
	}
	if d, err := c.SandboxCPU(ctx, "sb_1"); err != nil || d != 1500*time.Millisecond {
		t.Errorf("SandboxCPU = %v, %v", d, err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)
	if ss, err := c.SandboxMetrics(ctx, "sb_1", t0, t0.Add(time.Hour)); err != nil {
		t.Errorf("SandboxMetrics: %v", err)
	} else if want := []nodecontract.Sample{{Time: t0, CPUCount: 2, CPUUsedPct: 12.5, MemUsed: 1 << 20, MemTotal: 256 << 20, DiskTotal: 1 << 30},
		{Time: t0.Add(time.Hour), CPUCount: 2, CPUUsedPct: 12.5, MemUsed: 1 << 20, MemTotal: 256 << 20, DiskTotal: 1 << 30}}; !cmp.Equal(ss, want) {
		t.Errorf("SandboxMetrics = %+v; want %+v", ss, want)
	}
	if ss, err := c.SandboxMetrics(ctx, "sb_1", time.Time{}, time.Time{}); err != nil || ss == nil || len(ss) != 0 {
		t.Errorf("SandboxMetrics without bounds = %#v, %v; want an empty list", ss, err)
	}
	if _, err := c.SandboxMetrics(ctx, "sb_9", time.Time{}, time.Time{}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("SandboxMetrics of a sandbox not running = %v; want failed precondition", err)
	}
	if fl, err := c.Flows(ctx, "sb_1", flowlog.Filter{Host: "x.test"}); err != nil || len(fl) != 1 || fl[0].Host != "x.test" || fl[0].SandboxID != "sb_1" {
		t.Errorf("Flows = %+v, %v", fl, err)
	}
	if err := c.CopyCA(ctx, "se_1", "se_2", "tn_1"); err != nil {
		t.Fatal(err)
	}
	if n, err := c.RewrapCAs(ctx, "tn_1"); err != nil || n != 3 {
		t.Errorf("RewrapCAs = %d, %v", n, err)
	}
	c.ForgetCA("se_2")
	if err := c.DestroySandbox(ctx, "sb_1"); err != nil {
		t.Fatal(err)
	}
	want := []string{"create sb_1 tn_1 default 268435456 [8080]", "network sb_1 allow", "copy-ca se_1 se_2 tn_1", "rewrap tn_1", "forget-ca se_2", "destroy sb_1"}
	fn.mu.Lock()
	got := fn.calls
	fn.mu.Unlock()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the node saw\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := c.TemplateRoot(ctx, "default"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("TemplateRoot without templates = %v; want failed precondition", err)
	}
}

// TestImages: snapshots and restores carry snapshot IDs and grants, never image bytes; a grant arrives
// intact and for its tenant; a snapshot request the node could not take is refused before it reaches
// the node.
func TestImages(t *testing.T) {
	fn, c, _, _ := setup(t)
	ctx := t.Context()
	img, err := c.Snapshot(ctx, "sb_1", nodecontract.SnapshotRequest{TenantID: "tn_1", SnapshotID: "sn_1", Then: nodecontract.ThenRun, Meta: map[string]string{"session": "se_1"}})
	if want := (nodecontract.Image{Bytes: 3 << 20, Runtime: "gvisor", FilesPart: "fs.tar"}); err != nil || img != want {
		t.Fatalf("Snapshot = %+v, %v; want %+v", img, err, want)
	}
	if _, err := c.Snapshot(ctx, "sb_1", nodecontract.SnapshotRequest{TenantID: "tn_1", SnapshotID: "sn_2", Then: nodecontract.ThenDestroy}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Snapshot(ctx, "sb_2", nodecontract.SnapshotRequest{TenantID: "tn_1", SnapshotID: "sn_2", Then: nodecontract.ThenDestroy}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("snapshot of an unknown sandbox = %v; want failed precondition", err)
	}
	for _, req := range []nodecontract.SnapshotRequest{
		{SnapshotID: "sn_3", Then: nodecontract.ThenRun},
		{TenantID: "tn_1", Then: nodecontract.ThenRun},
		{TenantID: "tn_1", SnapshotID: "sn_3"},
		{TenantID: "tn_1", SnapshotID: "sn_3", Then: "pause"},
	} {
		if _, err := c.Snapshot(ctx, "sb_1", req); !errors.Is(err, errdefs.ErrInvalidArgument) || httperr.Status(err) != http.StatusBadRequest {
			t.Errorf("Snapshot(%+v) = %v (status %d); want invalid argument (400)", req, err, httperr.Status(err))
		}
	}
	key := bytes.Repeat([]byte{0xab}, 96)
	g, err := snapshot.UnmarshalGrant("tn_1", key)
	if err != nil {
		t.Fatal(err)
	}
	// A create request of any size goes with the snapshot's ID and the grant.
	var big policy.Policy
	for i := range 500 {
		big.Rules = append(big.Rules, policy.Rule{Name: fmt.Sprintf("rule-%d", i), Action: "allow", Host: fmt.Sprintf("host-%d.example.com", i)})
	}
	if err := c.RestoreSandbox(ctx, nodecontract.CreateRequest{ID: "sb_3", TenantID: "tn_1", Network: big}, nodecontract.ImageSource{SnapshotID: "sn_1", Grant: g}); err != nil {
		t.Fatal(err)
	}
	if err := c.RestoreSandbox(ctx, nodecontract.CreateRequest{ID: "sb_4", TenantID: "tn_1"}, nodecontract.ImageSource{SnapshotID: "sn_1"}); err != nil {
		t.Fatal(err)
	}
	if err := c.DropImages(ctx, []string{"sn_1", "sn_2"}); err != nil {
		t.Fatal(err)
	}
	if rs, err := c.Runtimes(ctx); err != nil || len(rs) != 2 || rs[1].Name != "runc" || !rs[1].Has(nodecontract.AbilityFilesSnapshots) || rs[1].Has(nodecontract.AbilityFork) {
		t.Errorf("Runtimes = %+v, %v", rs, err)
	}
	want := []string{"snapshot sb_1 tn_1 sn_1 run se_1", "snapshot sb_1 tn_1 sn_2 destroy ", "restore sb_3 500 rules from sn_1 with grant tn_1 abababab",
		"restore sb_4 0 rules from sn_1 with no grant", "drop sn_1,sn_2"}
	fn.mu.Lock()
	defer fn.mu.Unlock()
	if strings.Join(fn.calls, "\n") != strings.Join(want, "\n") {
		t.Errorf("the node saw\n%s\nwant\n%s", strings.Join(fn.calls, "\n"), strings.Join(want, "\n"))
	}
}

// secondControlPlane returns the client of another control plane (cp-2) of the node at addr.
func secondControlPlane(t *testing.T, tc testCluster, addr string) *nodeapi.Client {
	t.Helper()
	cert, err := tc.ca.IssueTLS(cluster.Identity{Role: cluster.RoleControlPlane, ID: "cp-2"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := nodeapi.NewClient(nodeapi.ClientConfig{NodeID: "node-a", Addr: addr, Cert: cert, Roots: tc.ca.Pool()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestLinkAndPorts: two control planes reach one sandbox's daemon through the node at once, and a
// port's bytes pass both ways; an unknown sandbox or closed port is a plain error.
func TestLinkAndPorts(t *testing.T) {
	_, c, tc, addr := setup(t)
	c2 := secondControlPlane(t, tc, addr)
	ctx := t.Context()
	var wg sync.WaitGroup
	for i, cl := range []*nodeapi.Client{c, c2} {
		for j := range 5 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, err := cl.Link(ctx, "sb_1")
				if err != nil {
					t.Error(err)
					return
				}
				want := fmt.Sprintf("cp %d call %d", i, j)
				res, err := l.Exec(ctx, proto.ExecRequest{Argv: []string{"echo", want}})
				if err != nil || string(res.Stdout) != want+"\n" {
					t.Errorf("exec: %q, %v", res.Stdout, err)
				}
			}()
		}
	}
	wg.Wait()
	// A channel that ended is dialed again.
	l, _ := c.Link(ctx, "sb_1")
	l.Close()
	l2, err := c.Link(ctx, "sb_1")
	if err != nil || l2 == l {
		t.Fatalf("Link after close = %p, %v", l2, err)
	}
	if err := l2.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Link(ctx, "sb_9"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Link(unknown) = %v; want failed precondition", err)
	}

	conn, err := c.DialPort(ctx, "sb_1", 8080)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	msg := bytes.Repeat([]byte("0123456789"), 100_000)
	go func() { _, _ = conn.Write(msg) }()
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(conn, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("port echo: %v", err)
	}
	if _, err := c.DialPort(ctx, "sb_1", 9); !errors.Is(err, errdefs.ErrPortClosed) {
		t.Errorf("DialPort(closed) = %v; want port closed", err)
	}
}

// TestLinkThroughCheckpoints: a checkpoint refused because a call is in progress leaves that call be;
// one that goes ahead drops the other control planes' channels, and each of their calls either ran or
// fails with link.ErrNotStarted, never reached the daemon, and is sent again on a new channel.
func TestLinkThroughCheckpoints(t *testing.T) {
	_, c, tc, addr := setup(t)
	ctx := t.Context()
	l, err := c.Link(ctx, "sb_1")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		res, err := l.Exec(ctx, proto.ExecRequest{Argv: []string{"sh", "-c", "sleep 0.5; echo ok"}})
		if err == nil && string(res.Stdout) != "ok\n" {
			err = fmt.Errorf("stdout %q", res.Stdout)
		}
		done <- err
	}()
	time.Sleep(200 * time.Millisecond)
	if _, err := c.Snapshot(ctx, "sb_1", nodecontract.SnapshotRequest{TenantID: "tn_1", SnapshotID: "sn_1", Then: nodecontract.ThenRun, IfIdle: true}); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("checkpoint with a call in progress = %v; want busy (conflict)", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the call in progress when a checkpoint was refused: %v", err)
	}

	c2 := secondControlPlane(t, tc, addr)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	notStarted, ran := 0, 0
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				want := fmt.Sprintf("%d.%d", w, i)
				for {
					l, err := c2.Link(ctx, "sb_1")
					if err != nil {
						t.Error(err)
						return
					}
					res, err := l.Exec(ctx, proto.ExecRequest{Argv: []string{"echo", want}})
					if errors.Is(err, link.ErrNotStarted) {
						mu.Lock()
						notStarted++
						mu.Unlock()
						continue
					}
					if err != nil || string(res.Stdout) != want+"\n" {
						t.Errorf("exec %s: %q, %v; want it run or not started", want, res.Stdout, err)
						return
					}
					mu.Lock()
					ran++
					mu.Unlock()
					break
				}
			}
		}()
	}
	// Three seconds of checkpoints between the calls, and on (a loaded machine may leave the sandbox idle
	// seldom) until one went ahead while calls ran, for at most a minute.
	checkpoints := 0
	tested := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return checkpoints > 0 && ran > 0
	}
	start := time.Now()
	for ; time.Since(start) < 3*time.Second || !tested() && time.Since(start) < time.Minute; time.Sleep(5 * time.Millisecond) {
		_, err := c.Snapshot(ctx, "sb_1", nodecontract.SnapshotRequest{TenantID: "tn_1", SnapshotID: "sn_1", Then: nodecontract.ThenRun, IfIdle: true})
		switch {
		case err == nil:
			checkpoints++
		case !errors.Is(err, errdefs.ErrConflict):
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d checkpoints went ahead; %d calls ran, %d did not start and were sent again", checkpoints, ran, notStarted)
	if checkpoints == 0 || ran == 0 {
		t.Fatal("no checkpoint went ahead between the calls, or no call ran: nothing was tested")
	}
}

// TestOnlyTheClusterControlPlanes: a node's certificate cannot call a node, a control plane that meant
// another node does not take this one, and a client without a certificate is refused.
func TestOnlyTheClusterControlPlanes(t *testing.T) {
	_, _, tc, addr := setup(t)
	ctx := t.Context()
	other, err := tc.ca.IssueTLS(cluster.Identity{Role: cluster.RoleNode, ID: "node-b"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	asNode, err := nodeapi.NewClient(nodeapi.ClientConfig{NodeID: "node-a", Addr: addr, Cert: other, Roots: tc.ca.Pool()})
	if err != nil {
		t.Fatal(err)
	}
	defer asNode.Close()
	if err := asNode.CreateSandbox(ctx, nodecontract.CreateRequest{ID: "sb_x"}); err == nil {
		t.Error("a node's certificate created a sandbox on another node")
	}
	if _, err := asNode.Link(ctx, "sb_1"); err == nil {
		t.Error("a node's certificate reached a sandbox's daemon on another node")
	}
	wrong, err := nodeapi.NewClient(nodeapi.ClientConfig{NodeID: "node-b", Addr: addr, Cert: tc.cp, Roots: tc.ca.Pool()})
	if err != nil {
		t.Fatal(err)
	}
	defer wrong.Close()
	if _, err := wrong.Info(ctx); err == nil || !strings.Contains(err.Error(), "node-a") {
		t.Errorf("a client of node-b took node-a: %v", err)
	}
	plain := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the test wants in without a certificate
	if resp, err := plain.Get("https://" + addr + "/node/v1/info"); err == nil {
		resp.Body.Close()
		t.Error("a client without a certificate got an answer")
	}
}
