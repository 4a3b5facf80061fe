package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/cli"
	"github.com/airlockrun/airlock/internal/mcpserver"
	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// TestRedTeamReads (issue 40, "access ends when it should", reads): what a sandbox wrote is read on
// the host side with a bound that holds while reading, never a size checked first. As root, the
// sandbox makes a sparse 64 GiB file, grows a file between the host's stat and its read, and fills a
// snapshot's layer with a large file; MCP read_file, the Go SDK's reads, the CLI's cp and the snapshot
// views each end with a clear error or a bounded result while the live heap of this process (which
// runs the server, the MCP server, the SDK and the CLI) stays under a bound. Positive controls: a
// small file reads whole and correct through each path, and the attacks' files are what they claim.
// The Python and TypeScript SDKs' bounded reads run in TestPythonSDK and TestTypeScriptSDK, the
// console's in TestConsole.
func TestRedTeamReads(t *testing.T) {
	testenv.RequireSandboxes(t)
	e := testenv.Start(t, testenv.Options{})
	sb := create(t, e, airlock.CreateSandboxRequest{TimeoutSeconds: 1800})
	rootSh := func(t *testing.T, id, script string) *airlock.ExecResult {
		t.Helper()
		res := run(t, e, id, airlock.ExecRequest{User: "root", TimeoutSeconds: 300, Cmd: []string{"sh", "-c", script}})
		if res.ExitCode != 0 {
			t.Fatalf("as root: %q: %+v", script, res)
		}
		return res
	}
	// Few garbage bytes between collections, so that the heap measured is what is held.
	defer debug.SetGCPercent(debug.SetGCPercent(10))

	// The attack's file, and a small one.
	rootSh(t, sb.ID, "truncate -s 64G /tmp/huge && printf 'small and whole\\n' > /tmp/small")
	if res := rootSh(t, sb.ID, "stat -c %s /tmp/huge"); res.Stdout != "68719476736\n" {
		t.Fatalf("positive control: /tmp/huge is %q bytes; want 64 GiB", res.Stdout)
	}

	t.Run("MCP read_file", func(t *testing.T) {
		// The MCP server's client: after a stat of /tmp/grow, the sandbox (as root) makes the file a
		// sparse 64 GiB one before the host's next request: the race a stat-then-read loses, won
		// deterministically. Every body it reads stops when the heap guard trips.
		rootSh(t, sb.ID, "printf 'ten bytes\\n' > /tmp/grow")
		hook := &hookTransport{rt: http.DefaultTransport, afterStat: map[string]func(){
			"/tmp/grow": func() { // on the MCP server's goroutine: no t.Fatal here
				res, err := e.Client.Exec(context.Background(), sb.ID, airlock.ExecRequest{User: "root", Cmd: []string{"truncate", "-s", "64G", "/tmp/grow"}})
				if err != nil || res.ExitCode != 0 {
					t.Errorf("grow /tmp/grow: %+v, %v", res, err)
				}
			},
		}}
		cs := inMemory(t, airlock.New(e.URL, airlock.WithAPIKey(e.APIKey), airlock.WithHTTPClient(&http.Client{Transport: hook})))
		read := func(t *testing.T, path string) (mcpserver.FileOut, string) {
			t.Helper()
			var out mcpserver.FileOut
			var text string
			peak := heapGuard(t, 128<<20, func(ctx context.Context) {
				hook.setStop(ctx)
				text = mcpCall(t, cs, "read_file", map[string]any{"id": sb.ID, "path": path}, &out)
			})
			t.Logf("read_file %s: the heap grew by %d KiB at most", path, peak>>10)
			if peak > 128<<20 {
				t.Fatalf("read_file %s: the heap grew by %d MiB (stopped at 128 MiB): the read is not bounded; result %.200q", path, peak>>20, text)
			}
			return out, text
		}
		// Positive control.
		if out, text := read(t, "/tmp/small"); out.Content != "small and whole\n" || out.Encoding != "utf-8" {
			t.Errorf("read_file /tmp/small: %+v %q; want its contents", out, text)
		}
		if _, text := read(t, "/tmp/huge"); !strings.HasPrefix(text, "error: /tmp/huge is") || !strings.Contains(text, fmt.Sprintf("read_file returns at most %d", mcpserver.MaxFileBytes)) {
			t.Errorf("read_file of a sparse 64 GiB file: %.300q; want an error saying read_file returns at most %d bytes", text, mcpserver.MaxFileBytes)
		}
		// The race: whatever read_file did, it ends bounded: the file as it was, or an error.
		out, text := read(t, "/tmp/grow")
		switch {
		case strings.HasPrefix(text, "error: "):
			if !strings.Contains(text, "is larger than") {
				t.Errorf("read_file of a file grown after a stat: %.300q; want an error saying it is too large", text)
			}
		case out.Content != "ten bytes\n":
			t.Errorf("read_file of a file grown after a stat: %d bytes; want the file as it was read", out.Size)
		}
	})

	t.Run("Go SDK reads", func(t *testing.T) {
		// Positive control.
		b, err := e.Client.ReadFileLimit(ctxT(t, time.Minute), sb.ID, "/tmp/small", 16)
		if err != nil || string(b) != "small and whole\n" {
			t.Fatalf("ReadFileLimit /tmp/small: %q, %v; want its contents", b, err)
		}
		var rerr error
		peak := heapGuard(t, 128<<20, func(ctx context.Context) {
			_, rerr = e.Client.ReadFileLimit(ctx, sb.ID, "/tmp/huge", 1<<20)
		})
		t.Logf("ReadFileLimit(1 MiB) of a sparse 64 GiB file: %v; the heap grew by %d KiB at most", rerr, peak>>10)
		if peak > 128<<20 || !errors.Is(rerr, airlock.ErrTooLarge) {
			t.Errorf("ReadFileLimit(1 MiB) of a sparse 64 GiB file: %v, the heap grew by %d MiB; want ErrTooLarge within 128 MiB", rerr, peak>>20)
		}
		// ReadFile, the call every caller already makes: bounded by the client's default.
		peak = heapGuard(t, 1<<30, func(ctx context.Context) {
			_, rerr = e.Client.ReadFile(ctx, sb.ID, "/tmp/huge")
		})
		t.Logf("ReadFile of a sparse 64 GiB file: %v; the heap grew by %d MiB at most", rerr, peak>>20)
		if peak > 1<<30 || !errors.Is(rerr, airlock.ErrTooLarge) {
			t.Errorf("ReadFile of a sparse 64 GiB file: %v, the heap grew by %d MiB; want ErrTooLarge within 1 GiB", rerr, peak>>20)
		}
	})

	t.Run("CLI cp streams to disk, extracts without following links", func(t *testing.T) {
		// As root the sandbox makes a tree with links pointing out of it, the way it would to steer
		// an extraction.
		rootSh(t, sb.ID, "mkdir -p /tmp/tree/sub && printf data > /tmp/tree/sub/f && ln -s .. /tmp/tree/sub/up && ln -s /etc /tmp/tree/etc")
		dst := t.TempDir()
		if code, _, errOut := cpRun(t, context.Background(), e, nil, sb.ID+":/tmp/tree", dst); code != 0 {
			t.Fatalf("cp the tree: exit %d: %s", code, errOut)
		}
		if b, err := os.ReadFile(filepath.Join(dst, "tree", "sub", "f")); err != nil || string(b) != "data" {
			t.Errorf("positive control: tree/sub/f = %q, %v", b, err)
		}
		for link, want := range map[string]string{"tree/sub/up": "..", "tree/etc": "/etc"} {
			if got, err := os.Readlink(filepath.Join(dst, link)); err != nil || got != want {
				t.Errorf("%s: %q, %v; want a link to %q, copied as a link", link, got, err, want)
			}
		}
		entries, _ := os.ReadDir(dst)
		if len(entries) != 1 {
			t.Errorf("cp wrote %d entries beside the copy; want only tree", len(entries))
		}
		// The sparse 64 GiB file to stdout: 256 MiB of it flow through with the heap flat.
		out := &countingWriter{stopAt: 256 << 20}
		var code int
		peak := heapGuard(t, 128<<20, func(ctx context.Context) {
			code, _, _ = cpRun(t, ctx, e, out, sb.ID+":/tmp/huge", "-")
		})
		t.Logf("cp of a sparse 64 GiB file to stdout: %d MiB streamed, the heap grew by %d KiB at most", out.n.Load()>>20, peak>>10)
		if out.n.Load() < 256<<20 {
			t.Errorf("positive control: cp wrote %d bytes (exit %d); want 256 MiB before the writer stopped it", out.n.Load(), code)
		}
		if peak > 128<<20 {
			t.Errorf("cp of a sparse 64 GiB file: the heap grew by %d MiB while 256 MiB streamed; want it flat (under 128 MiB)", peak>>20)
		}
	})

	t.Run("snapshot views", func(t *testing.T) {
		se := newSession(t, e, airlock.CreateSessionRequest{IdleTimeoutSeconds: never(), DiskMB: 2048})
		ctx := ctxT(t, 10*time.Minute)
		rootSh(t, se.ID, "printf 'note\\n' > /home/user/note.txt")
		a, err := e.Client.SnapshotSession(ctx, se.ID, airlock.CreateSnapshotRequest{})
		if err != nil {
			t.Fatal(err)
		}
		rootSh(t, se.ID, "head -c 256M /dev/urandom > /home/user/big && printf 'note 2\\n' > /home/user/note.txt")
		b, err := e.Client.SnapshotSession(ctx, se.ID, airlock.CreateSnapshotRequest{})
		if err != nil {
			t.Fatal(err)
		}
		// Positive control (and the first view, which waits for the layer to be stored).
		note, err := e.Client.ReadSnapshotFileLimit(ctx, se.ID, b.ID, "/home/user/note.txt", 64)
		if err != nil || string(note) != "note 2\n" {
			t.Fatalf("read note.txt from the snapshot: %q, %v", note, err)
		}
		var rerr error
		peak := heapGuard(t, 128<<20, func(ctx context.Context) {
			note, rerr = e.Client.ReadSnapshotFileLimit(ctx, se.ID, b.ID, "/home/user/note.txt", 64)
		})
		t.Logf("a small file of a snapshot whose layer holds 256 MiB: the heap grew by %d KiB at most", peak>>10)
		if rerr != nil || string(note) != "note 2\n" || peak > 128<<20 {
			t.Errorf("read a small file of a snapshot whose layer holds 256 MiB: %q, %v; the heap grew by %d MiB; want it within 128 MiB", note, rerr, peak>>20)
		}
		peak = heapGuard(t, 128<<20, func(ctx context.Context) {
			_, rerr = e.Client.ReadSnapshotFileLimit(ctx, se.ID, b.ID, "/home/user/big", 1<<30)
		})
		t.Logf("the 256 MiB file of a snapshot: %v; the heap grew by %d KiB at most", rerr, peak>>10)
		var apiErr *airlock.APIError
		if !errors.As(rerr, &apiErr) || apiErr.Status != http.StatusConflict || !strings.Contains(apiErr.Message, "larger than") || peak > 128<<20 {
			t.Errorf("read the 256 MiB file of a snapshot: %v; the heap grew by %d MiB; want a 409 saying it is larger than the bound, within 128 MiB", rerr, peak>>20)
		}
		var d *airlock.SnapshotDiff
		peak = heapGuard(t, 128<<20, func(ctx context.Context) {
			d, rerr = e.Client.DiffSnapshots(ctx, se.ID, a.ID, b.ID)
		})
		t.Logf("diff of two snapshots, one with a 256 MiB file: the heap grew by %d KiB at most", peak>>10)
		if rerr != nil || peak > 128<<20 {
			t.Fatalf("diff: %v; the heap grew by %d MiB; want it within 128 MiB", rerr, peak>>20)
		}
		found := false
		for _, c := range d.Changes {
			found = found || c.Path == "/home/user/big" && c.Kind == "added" && c.NewSize == 256<<20
		}
		if !found {
			t.Errorf("diff: %+v; want /home/user/big added, 256 MiB", d.Changes)
		}
	})

	// The sandbox is still fine, and so is the API.
	if res := sh(t, e, sb.ID, "cat /tmp/small"); res.Stdout != "small and whole\n" {
		t.Errorf("after the battery the sandbox answers %+v", res)
	}
}

// heapGuard runs f with a context that ends once the live heap of this process grows more than limit
// bytes above where it was when f started, and reports the largest growth it saw. Reads that are not
// bounded are stopped there, not by the machine running out of memory.
func heapGuard(t *testing.T, limit int64, f func(ctx context.Context)) int64 {
	t.Helper()
	runtime.GC()
	base := heapObjects()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var peak atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // owner: heapGuard, which waits for it
		defer wg.Done()
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			if d := heapObjects() - base; d > peak.Load() {
				peak.Store(d)
				if d > limit {
					cancel()
				}
			}
		}
	}()
	f(ctx)
	close(done)
	wg.Wait()
	if d := heapObjects() - base; d > peak.Load() {
		peak.Store(d)
	}
	return peak.Load()
}

// heapObjects is the heap's object bytes, live and not yet swept.
func heapObjects() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// hookTransport runs a hook after the first stat of a path it watches, and stops every body it
// returns once the context set with setStop ends.
type hookTransport struct {
	rt        http.RoundTripper
	afterStat map[string]func()
	mu        sync.Mutex
	// stop is guarded by mu.
	stop context.Context
	done sync.Map // paths whose hook ran
}

func (h *hookTransport) setStop(ctx context.Context) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stop = ctx
}

func (h *hookTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	h.mu.Lock()
	stop := h.stop
	h.mu.Unlock()
	if stop == nil {
		stop = context.Background()
	}
	resp, err := h.rt.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	p := r.URL.Query().Get("path")
	if hook := h.afterStat[p]; hook != nil && strings.HasSuffix(r.URL.Path, "/files/stat") {
		if _, ran := h.done.LoadOrStore(p, true); !ran {
			hook()
		}
	}
	resp.Body = stopBody{ReadCloser: resp.Body, ctx: stop}
	return resp, nil
}

// stopBody fails its reads once ctx ends.
type stopBody struct {
	io.ReadCloser
	ctx context.Context
}

func (b stopBody) Read(p []byte) (int, error) {
	if err := b.ctx.Err(); err != nil {
		return 0, err
	}
	return b.ReadCloser.Read(p)
}

// countingWriter counts what is written and fails once it holds stopAt bytes.
type countingWriter struct {
	n      atomic.Int64
	stopAt int64
}

func (w *countingWriter) Write(p []byte) (int, error) {
	if w.n.Add(int64(len(p))) >= w.stopAt {
		return 0, errors.New("enough")
	}
	return len(p), nil
}

// cpRun runs `airlock cp src dst` in this process, its standard output to out (a buffer if nil).
func cpRun(t *testing.T, ctx context.Context, e *testenv.Env, out io.Writer, src, dst string) (int, string, string) {
	t.Helper()
	var buf, errOut bytes.Buffer
	if out == nil {
		out = &buf
	}
	code := cli.Run(ctx, []string{"--url", e.URL, "--api-key", e.APIKey, "cp", src, dst},
		cli.Streams{In: strings.NewReader(""), Out: out, Err: &errOut})
	return code, buf.String(), errOut.String()
}
