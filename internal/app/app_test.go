package app_test

import (
	"context"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// TestNoGoroutineLeak runs a whole Airlock in the test process — a sandbox, an exec, a stream that the
// client abandons — and checks that after a clean stop the goroutines are back where they started.
func TestNoGoroutineLeak(t *testing.T) {
	testenv.RequireSandboxes(t)
	testenv.Binary(t) // build first: its goroutines are not Airlock's
	before := runtime.NumGoroutine()
	e := testenv.Start(t, testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := e.Client.CreateSandbox(ctx, airlock.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Client.Exec(ctx, sb.ID, airlock.ExecRequest{Cmd: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	st, err := e.Client.ExecStream(ctx, sb.ID, airlock.ExecRequest{Cmd: []string{"sleep", "60"}}, airlock.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}
	http.DefaultClient.CloseIdleConnections() // the SDK client uses the default client
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		t.Errorf("%d goroutines after stop; %d before. Stacks:\n%s", n, before, strings.TrimSpace(stacks))
	}
}
