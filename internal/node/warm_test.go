package node_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/node"
	"github.com/airlockrun/airlock/internal/nodecontract"
)

// TestWarmPool: a create of a start snapshot that TakeWarm gave an ID gets the sandbox the pool restored
// ahead, woken with the create's environment; the pool refills; a sandbox of the pool is nobody's until
// then (Sandboxes leaves it out); one reserved for another kind of create is destroyed and the create
// restores anew; replacing the start snapshot or stopping the node destroys the pool.
func TestWarmPool(t *testing.T) {
	e := newEnv(t)
	node.SetWarmTimes(e.n, time.Second, time.Minute)
	ctx := t.Context()
	key := strings.Repeat("a", 64) + "-" + strings.Repeat("b", 16)
	save := func(id string) {
		t.Helper()
		e.create(t, id)
		if err := e.n.SaveStart(ctx, id, key); err != nil {
			t.Fatal(err)
		}
		if err := e.n.DestroySandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	save("sb_build")
	req := nodecontract.CreateRequest{TenantID: "tn_1", Template: "default", Start: &nodecontract.Start{Key: key, Cmd: []string{"true"}}}
	take := func(req nodecontract.CreateRequest) string {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if id, ok := e.n.TakeWarm(ctx, req); ok {
				return id
			}
		}
		t.Fatal("TakeWarm found no sandbox in 10 s")
		return ""
	}
	listed := func(id string) bool {
		ids, err := e.n.Sandboxes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return slices.Contains(ids, id)
	}
	waitReady := func(want int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); e.n.StartStats().Ready != want; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("warm sandboxes ready: %d; want %d", e.n.StartStats().Ready, want)
			}
		}
	}

	id := take(req)
	if !strings.HasPrefix(id, "sb_") {
		t.Errorf("TakeWarm gave %q; want an ID of the control plane's form", id)
	}
	if _, err := e.d.Info(id); err != nil {
		t.Fatalf("the warm sandbox is not in the driver: %v", err)
	}
	if listed(id) {
		t.Error("Sandboxes lists a warm sandbox no create took yet: a reconcile would destroy it as an orphan")
	}
	waitReady(1) // refilled
	first := req
	first.ID, first.Env = id, []string{"WHO=first"}
	if err := e.n.CreateSandbox(ctx, first); err != nil {
		t.Fatal(err)
	}
	if got := e.sh(t, id, `echo "$WHO $FROM_TEMPLATE"`); got != "first t" {
		t.Errorf("the warm sandbox's environment: %q; want the create's", got)
	}
	if !listed(id) {
		t.Error("Sandboxes leaves out a created sandbox")
	}
	if st := e.n.StartStats(); st.Warm != 1 || st.Restored != 0 {
		t.Errorf("StartStats = %+v; want one warm create", st)
	}

	// Reserved for one kind, created as another: that warm sandbox goes, the create restores anew.
	other := take(req)
	mismatched := req
	mismatched.ID, mismatched.Limits = other, nodecontract.Limits{MemoryBytes: 256 << 20}
	if err := e.n.CreateSandbox(ctx, mismatched); err != nil {
		t.Fatal(err)
	}
	if st := e.n.StartStats(); st.Warm != 1 || st.Restored != 1 {
		t.Errorf("StartStats = %+v; want the mismatched create restored", st)
	}
	if info, err := e.d.Info(other); err != nil || info.Spec.Limits.MemoryBytes != 256<<20 {
		t.Errorf("the mismatched create's sandbox: %+v, %v; want it booted with its own limits", info.Spec.Limits, err)
	}
	// A create of an ID TakeWarm never gave is not handed a warm sandbox.
	plain := req
	plain.ID = "sb_plain"
	if err := e.n.CreateSandbox(ctx, plain); err != nil {
		t.Fatal(err)
	}
	if st := e.n.StartStats(); st.Warm != 1 || st.Restored != 2 {
		t.Errorf("StartStats = %+v; want the plain create restored", st)
	}

	// The ID of a warm sandbox no TakeWarm gave cannot be created: it is nobody's.
	waitReady(1)
	var warm []string
	for _, x := range driverIDs(t, e) {
		if !listed(x) {
			warm = append(warm, x)
		}
	}
	if len(warm) != 1 {
		t.Fatalf("warm sandboxes %v; want one", warm)
	}
	guessed := req
	guessed.ID = warm[0]
	if err := e.n.CreateSandbox(ctx, guessed); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("a create of a warm sandbox's ID no TakeWarm gave = %v; want already exists", err)
	}
	// Reserved, then created without the start: that warm sandbox goes, the create boots anew.
	bare := take(req)
	noStart := req
	noStart.ID, noStart.Start = bare, nil
	if err := e.n.CreateSandbox(ctx, noStart); err != nil {
		t.Fatal(err)
	}
	if info, err := e.d.Info(bare); err != nil || info.RestoredFrom != nil {
		t.Errorf("the create without a start: %+v, %v; want it booted, not the warm sandbox", info, err)
	}

	// A new start snapshot of the key replaces the pool's sandboxes of the old one.
	waitReady(1)
	warm = warm[:0]
	for _, x := range driverIDs(t, e) {
		if !listed(x) {
			warm = append(warm, x)
		}
	}
	save("sb_build2")
	for _, x := range warm {
		if _, err := e.d.Info(x); err == nil {
			t.Errorf("warm sandbox %s of the replaced start snapshot is still there", x)
		}
	}
	// A reservation no create used in time is destroyed; its create, when it comes, restores anew.
	late := take(req)
	lateReq := req
	lateReq.ID = late
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		// Gone from the driver, and then from the pool: until then a create is refused (claimWarm).
		if _, err := e.d.Info(late); err != nil && !node.InWarmPool(e.n, late) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a reservation older than the hold time is still there")
		}
	}
	restored := e.n.StartStats().Restored
	if err := e.n.CreateSandbox(ctx, lateReq); err != nil {
		t.Fatal(err)
	}
	if st := e.n.StartStats(); st.Restored != restored+1 {
		t.Errorf("StartStats = %+v; want the late create restored", st)
	}
	// A stop destroys the pool: only the created sandboxes are left to the next run.
	take(req)
	waitReady(1)
	if err := e.n.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := driverIDs(t, e)
	want := []string{id, other, "sb_plain", bare, late}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("after Shutdown the driver has %v; want only the created %v (the reserved one and the warm one destroyed)", got, want)
	}
}

// driverIDs lists the sandboxes the fake driver runs.
func driverIDs(t *testing.T, e *env) []string {
	t.Helper()
	ids, err := e.d.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return ids
}
