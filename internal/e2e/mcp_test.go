package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockrun/airlock/internal/cli"
	"github.com/airlockrun/airlock/internal/mcpserver"
	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// mcpCall calls a tool and decodes its structured result into out (if not nil); a tool error fails the
// test unless wantErr, in which case its text is returned.
func mcpCall(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any, out any) string {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	text := ""
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text += tc.Text
		}
	}
	if res.IsError {
		return "error: " + text
	}
	if out != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: %v in %s", tool, err, b)
		}
	}
	return text
}

func mcpMust(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any, out any) {
	t.Helper()
	if text := mcpCall(t, cs, tool, args, out); strings.HasPrefix(text, "error: ") {
		t.Fatalf("%s(%v): %s", tool, args, text)
	}
}

// mcpClient connects the go-sdk's client to an MCP server over transport t.
func mcpClient(t *testing.T, tr mcp.Transport) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// inMemory serves mcpserver.New(c) to a client in this process.
func inMemory(t *testing.T, c *airlock.Client) *mcp.ClientSession {
	t.Helper()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := mcpserver.New(c, "test").Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	return mcpClient(t, ct)
}

// TestMCP drives `airlock mcp`'s tools with MCP clients against a real server: the go-sdk's client (in
// process, and over streamable HTTP with each request's own credential) through a session's whole
// life, an access token's server that reaches its one sandbox only, and the MCP Inspector's CLI (npm)
// over stdio and HTTP.
func TestMCP(t *testing.T) {
	testenv.RequireSandboxes(t)
	e := testenv.Start(t, testenv.Options{})
	cs := inMemory(t, e.Client)

	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	for _, want := range []string{"create_sandbox", "create_session", "list", "delete", "run_command", "read_file", "write_file",
		"list_files", "pause_session", "resume_session", "fork_session", "snapshot_session", "timeline", "restore_session", "diff", "port_url", "run_code"} {
		if !slices.Contains(names, want) {
			t.Errorf("tool %s missing from %v", want, names)
		}
	}

	var se mcpserver.Thing
	mcpMust(t, cs, "create_session", map[string]any{"metadata": map[string]string{"suite": "mcp"}}, &se)
	t.Cleanup(func() { _ = e.Client.DeleteSession(context.Background(), se.ID) })
	var out mcpserver.CommandOut
	mcpMust(t, cs, "run_command", map[string]any{"id": se.ID, "command": "echo hi; echo oops >&2; exit 3"}, &out)
	if out.ExitCode != 3 || out.Stdout != "hi\n" || out.Stderr != "oops\n" {
		t.Errorf("run_command: %+v", out)
	}
	mcpMust(t, cs, "run_command", map[string]any{"id": se.ID, "command": "seq 1 100000", "max_output_bytes": 20}, &out)
	if !out.StdoutTruncated || len(out.Stdout) > 20 || !strings.HasSuffix(out.Stdout, "\n99999\n100000\n") {
		t.Errorf("run_command with a 20-byte cap: %+v", out)
	}
	mcpMust(t, cs, "run_command", map[string]any{"id": se.ID, "command": "sleep 30", "timeout_seconds": 1}, &out)
	if !out.TimedOut {
		t.Errorf("run_command past its timeout: %+v", out)
	}
	if text := mcpCall(t, cs, "run_command", map[string]any{"id": se.ID, "command": "true", "timeout_seconds": 9999}, nil); !strings.Contains(text, "timeout_seconds must be") {
		t.Errorf("a timeout past the bound: %s", text)
	}

	mcpMust(t, cs, "write_file", map[string]any{"id": se.ID, "path": "/home/user/work/a.txt", "content": "first"}, nil)
	var file mcpserver.FileOut
	mcpMust(t, cs, "read_file", map[string]any{"id": se.ID, "path": "/home/user/work/a.txt"}, &file)
	if file.Content != "first" || file.Encoding != "utf-8" {
		t.Errorf("read_file: %+v", file)
	}
	var entries mcpserver.Entries
	mcpMust(t, cs, "list_files", map[string]any{"id": se.ID, "path": "/home/user/work"}, &entries)
	if len(entries.Entries) != 1 || entries.Entries[0].Name != "a.txt" {
		t.Errorf("list_files: %+v", entries)
	}

	var first, second mcpserver.SnapshotOut
	mcpMust(t, cs, "snapshot_session", map[string]any{"id": se.ID, "name": "before"}, &first)
	mcpMust(t, cs, "write_file", map[string]any{"id": se.ID, "path": "/home/user/work/a.txt", "content": "second"}, nil)
	mcpMust(t, cs, "snapshot_session", map[string]any{"id": se.ID}, &second)
	var tl mcpserver.TimelineOut
	mcpMust(t, cs, "timeline", map[string]any{"id": se.ID}, &tl)
	if len(tl.Snapshots) < 2 {
		t.Errorf("timeline: %+v", tl)
	}
	var d airlock.SnapshotDiff
	mcpMust(t, cs, "diff", map[string]any{"id": se.ID, "from": first.ID, "to": second.ID, "path": "/home/user/work/a.txt"}, &d)
	if !strings.Contains(d.Unified, "-first") || !strings.Contains(d.Unified, "+second") {
		t.Errorf("diff: %+v", d)
	}
	mcpMust(t, cs, "restore_session", map[string]any{"id": se.ID, "snapshot_id": first.ID}, nil)
	mcpMust(t, cs, "read_file", map[string]any{"id": se.ID, "path": "/home/user/work/a.txt"}, &file)
	if file.Content != "first" {
		t.Errorf("after restore_session to %q: %+v", first.Name, file)
	}

	var th mcpserver.Thing
	mcpMust(t, cs, "pause_session", map[string]any{"id": se.ID}, &th)
	if th.State != airlock.SessionPaused {
		t.Errorf("pause_session: %+v", th)
	}
	mcpMust(t, cs, "resume_session", map[string]any{"id": se.ID}, &th)
	if th.State != airlock.SessionRunning {
		t.Errorf("resume_session: %+v", th)
	}
	var forks mcpserver.Things
	mcpMust(t, cs, "fork_session", map[string]any{"id": se.ID, "count": 2}, &forks)
	if len(forks.Items) != 2 {
		t.Fatalf("fork_session: %+v", forks)
	}
	var listed mcpserver.Things
	mcpMust(t, cs, "list", map[string]any{"kind": "sessions"}, &listed)
	if len(listed.Items) < 3 {
		t.Errorf("list sessions: %+v", listed)
	}
	var port mcpserver.PortOut
	mcpMust(t, cs, "port_url", map[string]any{"id": se.ID, "port": 8080}, &port)
	if !strings.Contains(port.URL, "8080") || !strings.Contains(port.URL, strings.TrimPrefix(se.ID, "se_")) || !strings.Contains(port.URL, "airlock_token=") {
		t.Errorf("port_url: %+v", port)
	}
	for _, f := range forks.Items {
		mcpMust(t, cs, "delete", map[string]any{"id": f.ID}, nil)
	}
	if text := mcpCall(t, cs, "delete", map[string]any{"id": "nonsense"}, nil); !strings.HasPrefix(text, "error: ") {
		t.Errorf("delete of a bad id: %s", text)
	}

	t.Run("token", func(t *testing.T) {
		// A server started with an access token reaches its sandbox's exec and files, nothing else.
		ctx := context.Background()
		var mine, other mcpserver.Thing
		mcpMust(t, cs, "create_sandbox", nil, &mine)
		mcpMust(t, cs, "create_sandbox", nil, &other)
		tok, err := e.Client.CreateAccessToken(ctx, airlock.CreateAccessTokenRequest{SandboxID: mine.ID, Scopes: []string{"exec", "files"}})
		if err != nil {
			t.Fatal(err)
		}
		scoped := inMemory(t, airlock.New(e.URL, airlock.WithAPIKey(tok.Token)))
		mcpMust(t, scoped, "run_command", map[string]any{"id": mine.ID, "command": "true"}, nil) // positive control
		for _, c := range []struct {
			tool string
			args map[string]any
		}{
			{"run_command", map[string]any{"id": other.ID, "command": "true"}},
			{"read_file", map[string]any{"id": other.ID, "path": "/etc/hostname"}},
			{"list", nil},
			{"create_sandbox", nil},
			{"delete", map[string]any{"id": mine.ID}},
			{"port_url", map[string]any{"id": mine.ID, "port": 80}},
		} {
			if text := mcpCall(t, scoped, c.tool, c.args, nil); !strings.HasPrefix(text, "error: ") {
				t.Errorf("%s with a token for %s: %s", c.tool, mine.ID, text)
			}
		}
		if _, err := e.Client.GetSandbox(ctx, mine.ID); err != nil {
			t.Errorf("the token's sandbox after the refused calls: %v", err)
		}
	})

	t.Run("http", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan int)
		var stderr bytes.Buffer
		go func() {
			done <- cli.Run(ctx, []string{"mcp", "--url", e.URL, "--api-key", "unused", "--listen", addr}, cli.Streams{In: strings.NewReader(""), Out: &bytes.Buffer{}, Err: &stderr})
		}()
		t.Cleanup(func() { cancel(); <-done })
		url := "http://" + addr + "/mcp"
		waitListening(t, addr)
		resp, err := http.Post(url, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("a request without a credential: %d", resp.StatusCode)
		}
		hc := &http.Client{Transport: bearer{e.APIKey}}
		hs := mcpClient(t, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc})
		var sb mcpserver.Thing
		mcpMust(t, hs, "create_sandbox", nil, &sb)
		mcpMust(t, hs, "run_command", map[string]any{"id": sb.ID, "command": "echo over http"}, &out)
		if out.Stdout != "over http\n" {
			t.Errorf("run_command over HTTP: %+v", out)
		}
		mcpMust(t, hs, "delete", map[string]any{"id": sb.ID}, nil)

		// The MCP Inspector's CLI, a client of its own, over stdio and over HTTP.
		dir := testenv.NodePackage(t, "mcpinspector")
		bin := testenv.Binary(t)
		inspect := func(args ...string) string {
			t.Helper()
			cmd := exec.Command("npx", append([]string{"--no-install", "mcp-inspector", "--cli"}, args...)...)
			cmd.Dir = dir
			cmd.Env = os.Environ()
			b, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("mcp-inspector %v: %v\n%s", args, err, b)
			}
			return string(b)
		}
		stdio := []string{"-e", "AIRLOCK_URL=" + e.URL, "-e", "AIRLOCK_API_KEY=" + e.APIKey, bin, "mcp"}
		if got := inspect(append(stdio, "--method", "tools/list")...); !strings.Contains(got, "run_command") || !strings.Contains(got, "restore_session") {
			t.Errorf("inspector tools/list over stdio:\n%s", got)
		}
		got := inspect(append(stdio, "--method", "tools/call", "--tool-name", "create_sandbox")...)
		var created struct {
			StructuredContent mcpserver.Thing `json:"structuredContent"`
		}
		if err := json.Unmarshal([]byte(got[strings.Index(got, "{"):]), &created); err != nil || created.StructuredContent.ID == "" {
			t.Fatalf("inspector tools/call create_sandbox over stdio: %v\n%s", err, got)
		}
		id := created.StructuredContent.ID
		got = inspect(url, "--transport", "http", "--header", "Authorization: Bearer "+e.APIKey,
			"--method", "tools/call", "--tool-name", "run_command", "--tool-arg", "id="+id, "command=echo from the inspector")
		if !strings.Contains(got, `from the inspector\n`) {
			t.Errorf("inspector tools/call run_command over HTTP:\n%s", got)
		}
		_ = e.Client.DeleteSandbox(context.Background(), id)
	})
}

// bearer adds an Authorization header to every request.
type bearer struct{ cred string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.cred)
	return http.DefaultTransport.RoundTrip(r)
}

func waitListening(t *testing.T, addr string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
	}
	t.Fatalf("nothing listens at %s", addr)
}
