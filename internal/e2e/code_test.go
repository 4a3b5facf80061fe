package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockrun/airlock/internal/mcpserver"
	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// TestCodeInterpreter builds the code-interpreter template from templates/code-interpreter with the
// CLI, as the README does (here over a default image that already has Debian's packages, made with
// mmdebstrap, so that the Dockerfile's apt step passes without the network), and drives it with the Go
// SDK in a session: state kept between runs, stdout and stderr, the last expression's value, errors with
// tracebacks, a matplotlib chart as PNG, a pandas table as HTML, JSON, per-run environment, contexts of
// their own, a timeout that interrupts and leaves the context usable, and the state through a pause and
// resume. Root in the sandbox then replaces the interpreter with liars (invalid lines, a line too long,
// a chart that is not base64, an output with no end, a flood): each run ends with an InterpreterError,
// and a well-formed answer (the positive control) passes. Another tenant gets not found; a sandbox
// without an interpreter a failed precondition. The unmodified @e2b/code-interpreter npm package runs
// its runCode against the same server (code.test.mjs).
func TestCodeInterpreter(t *testing.T) {
	testenv.RequireSandboxes(t)
	e := testenv.Start(t, testenv.Options{DefaultImage: testenv.CodeInterpreterImage(t)})
	ctx := ctxT(t, 15*time.Minute)
	c := e.Client
	ctxDir, err := filepath.Abs("../../templates/code-interpreter")
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI("--url", e.URL, "--api-key", e.APIKey, "template", "build", "code-interpreter", ctxDir)
	if code != 0 || !strings.Contains(out, "Start: ") {
		t.Fatalf("template build code-interpreter: %d %q %s", code, out, errOut)
	}

	se, err := c.CreateSession(ctx, airlock.CreateSessionRequest{Template: "code-interpreter"})
	if err != nil {
		t.Fatal(err)
	}
	runIn := func(id string, req airlock.RunCodeRequest) *airlock.Execution {
		t.Helper()
		ex, err := c.RunCode(ctx, id, req, nil)
		if err != nil {
			t.Fatalf("run %q: %v", req.Code, err)
		}
		return ex
	}
	run := func(code string) *airlock.Execution {
		t.Helper()
		return runIn(se.ID, airlock.RunCodeRequest{Code: code})
	}

	if ex := run("x = 41\nx + 1"); ex.Text() != "42" || ex.Error != nil || ex.ExecutionCount < 1 {
		t.Errorf("x + 1: %+v; want 42", ex)
	}
	var streamed []string
	ex, err := c.RunCode(ctx, se.ID, airlock.RunCodeRequest{Code: "import sys\nprint('out', x)\nprint('err', file=sys.stderr)"},
		&airlock.RunCodeOptions{OnStdout: func(s string) { streamed = append(streamed, s) }})
	if err != nil || strings.Join(ex.Stdout, "") != "out 41\n" || strings.Join(ex.Stderr, "") != "err\n" || strings.Join(streamed, "") != "out 41\n" {
		t.Errorf("print: %+v %v (streamed %q); want out 41 on stdout, err on stderr", ex, err, streamed)
	}
	if ex := run("def f():\n    return 1/0\nf()"); ex.Error == nil || ex.Error.Name != "ZeroDivisionError" ||
		!strings.Contains(ex.Error.Traceback, "return 1/0") || strings.Contains(ex.Error.Traceback, "\x1b[") {
		t.Errorf("1/0: %+v; want a ZeroDivisionError with its traceback, without colour codes", ex.Error)
	}
	ex = run("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('chart')\nplt.show()")
	if len(ex.Results) != 1 || ex.Results[0].PNG == "" {
		t.Fatalf("a matplotlib chart: %+v; want one PNG result", ex)
	}
	if png, err := base64.StdEncoding.DecodeString(strings.ReplaceAll(ex.Results[0].PNG, "\n", "")); err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n")) {
		t.Errorf("the chart is not a PNG: %v", err)
	}
	ex = run("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})")
	if len(ex.Results) != 1 || !ex.Results[0].IsMainResult || !strings.Contains(ex.Results[0].HTML, "<table") || !strings.Contains(ex.Text(), "a  b") {
		t.Errorf("a DataFrame: %+v; want its HTML table and text", ex.Results)
	}
	ex = run("from IPython.display import JSON, display\ndisplay(JSON({'k': [1, 2]}))")
	if len(ex.Results) != 1 || ex.Results[0].IsMainResult || strings.ReplaceAll(string(ex.Results[0].JSON), " ", "") != `{"k":[1,2]}` {
		t.Errorf("display(JSON): %+v; want the JSON, not the main result", ex.Results)
	}
	if ex := runIn(se.ID, airlock.RunCodeRequest{Code: "import os\nos.environ['GREETING']", Env: map[string]string{"GREETING": "hi"}}); ex.Text() != "hi" {
		t.Errorf("env for a run: %+v; want hi", ex)
	}
	if ex := run("os.environ.get('GREETING', 'unset')"); ex.Text() != "unset" {
		t.Errorf("env after the run: %q; want unset", ex.Text())
	}

	// A context of its own: its state is not the default's; listed; gone once deleted.
	cc, err := c.CreateCodeContext(ctx, se.ID, airlock.CreateCodeContextRequest{Cwd: "/tmp"})
	if err != nil || cc.Language != "python" || cc.Cwd != "/tmp" {
		t.Fatalf("create context: %+v %v", cc, err)
	}
	if ex := runIn(se.ID, airlock.RunCodeRequest{Code: "import os\n'x' in globals(), os.getcwd()", ContextID: cc.ID}); ex.Text() != "(False, '/tmp')" {
		t.Errorf("a new context: %q; want no x, in /tmp", ex.Text())
	}
	if cs, err := c.ListCodeContexts(ctx, se.ID); err != nil || len(cs) != 2 {
		t.Errorf("contexts: %+v %v; want the default and the new one", cs, err)
	}
	if err := c.DeleteCodeContext(ctx, se.ID, cc.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RunCode(ctx, se.ID, airlock.RunCodeRequest{Code: "1", ContextID: cc.ID}, nil); !isStatus(err, http.StatusNotFound) {
		t.Errorf("a run in a deleted context: %v; want 404", err)
	}
	for _, bad := range []airlock.RunCodeRequest{{Code: "1", ContextID: "a b"}, {Code: "1", ContextID: cc.ID, Language: "python"},
		{Code: "1", TimeoutSeconds: 99999}, {Code: "1", Env: map[string]string{"A=B": "c"}}, {Code: "1", Env: map[string]string{"A": "a\x00b"}},
		{Code: "1", Language: "cobol"}} {
		if _, err := c.RunCode(ctx, se.ID, bad, nil); !isStatus(err, http.StatusBadRequest) {
			t.Errorf("run %+v: %v; want 400", bad, err)
		}
	}

	// A timeout interrupts the run (a sleep that would outlast the next run's own timeout); the context
	// keeps its state and runs the next.
	if ex := runIn(se.ID, airlock.RunCodeRequest{Code: "import time\ntime.sleep(600)", TimeoutSeconds: 2}); ex.Error == nil || ex.Error.Name != airlock.CodeErrorTimeout {
		t.Errorf("a run past its timeout: %+v; want a TimeoutError", ex.Error)
	}
	if ex := runIn(se.ID, airlock.RunCodeRequest{Code: "x", TimeoutSeconds: 60}); ex.Text() != "41" {
		t.Errorf("after a timeout: %+v; want 41 (the sleep interrupted)", ex)
	}
	// Code that will not stop when interrupted: its kernel is restarted (in a context of its own).
	stubborn, err := c.CreateCodeContext(ctx, se.ID, airlock.CreateCodeContextRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if ex := runIn(se.ID, airlock.RunCodeRequest{ContextID: stubborn.ID, TimeoutSeconds: 2,
		Code: "import time\nwhile True:\n    try:\n        time.sleep(100)\n    except KeyboardInterrupt:\n        pass"}); ex.Error == nil || ex.Error.Name != "KernelRestarted" {
		t.Errorf("a run that ignores the interrupt: %+v; want its kernel restarted", ex.Error)
	}
	if ex := runIn(se.ID, airlock.RunCodeRequest{ContextID: stubborn.ID, Code: "1 + 1", TimeoutSeconds: 60}); ex.Text() != "2" {
		t.Errorf("the restarted context: %+v; want it to run", ex)
	}
	if err := c.DeleteCodeContext(ctx, se.ID, stubborn.ID); err != nil {
		t.Fatal(err)
	}

	// Through a pause and a resume: the memory, the kernel and its state come back.
	if _, err := c.PauseSession(ctx, se.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ResumeSession(ctx, se.ID); err != nil {
		t.Fatal(err)
	}
	if ex := run("x * 2"); ex.Text() != "82" {
		t.Errorf("after pause and resume: %+v; want 82", ex)
	}

	// Another tenant: not found. A sandbox without an interpreter: a failed precondition.
	other, err := c.CreateTenant(ctx, "code-other")
	if err != nil {
		t.Fatal(err)
	}
	oc := airlock.New(e.URL, airlock.WithAPIKey(other.APIKey.Key))
	if _, err := oc.RunCode(ctx, se.ID, airlock.RunCodeRequest{Code: "x"}, nil); !isStatus(err, http.StatusNotFound) {
		t.Errorf("another tenant's run: %v; want 404", err)
	}
	if _, err := oc.ListCodeContexts(ctx, se.ID); !isStatus(err, http.StatusNotFound) {
		t.Errorf("another tenant's list: %v; want 404", err)
	}
	plain := create(t, e, airlock.CreateSandboxRequest{})
	if _, err := c.RunCode(ctx, plain.ID, airlock.RunCodeRequest{Code: "1"}, nil); !isStatus(err, http.StatusConflict) ||
		!strings.Contains(err.Error(), "no code interpreter") {
		t.Errorf("a sandbox without an interpreter: %v; want 409 saying so", err)
	}

	t.Run("mcp", func(t *testing.T) { mcpRunCode(t, e, se.ID) })
	t.Run("e2b-code-interpreter", func(t *testing.T) { e2bCodeInterpreter(t, ctx, e) })
	t.Run("python-sdk", func(t *testing.T) {
		sdk, err := filepath.Abs("../../sdk/python")
		if err != nil {
			t.Fatal(err)
		}
		codeSDKTest(t, ctx, e, sdk, pythonForSDK, "-m", "unittest", "-v", "tests.test_code")
	})
	t.Run("typescript-sdk", func(t *testing.T) {
		sdk, err := filepath.Abs("../../sdk/typescript")
		if err != nil {
			t.Fatal(err)
		}
		codeSDKTest(t, ctx, e, sdk, "node", "--test", "--test-reporter=spec", "test/code.test.mjs")
	})
	t.Run("hostile", func(t *testing.T) { hostileInterpreter(t, ctx, e, se.ID) })
}

// codeSDKTest runs an SDK's code interpreter tests in dir against e, with the template built.
func codeSDKTest(t *testing.T, ctx context.Context, e *testenv.Env, dir, name string, args ...string) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(dir, "src"), "PYTHONDONTWRITEBYTECODE=1", "AIRLOCK_URL="+e.URL,
		"AIRLOCK_API_KEY="+e.APIKey, "AIRLOCK_CODE_TEMPLATE=code-interpreter")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Logf("%s %s:\n%s", name, strings.Join(args, " "), out.String())
	if err != nil || strings.Contains(out.String(), "skipped") && !strings.Contains(out.String(), "skipped 0") {
		t.Fatalf("the SDK's code tests failed or were skipped: %v", err)
	}
}

// mcpRunCode: the MCP server's run_code returns the output as structured content and the chart as an
// image.
func mcpRunCode(t *testing.T, e *testenv.Env, id string) {
	cs := inMemory(t, e.Client)
	var out mcpserver.CodeOut
	mcpMust(t, cs, "run_code", map[string]any{"id": id, "code": "print('from mcp')\nx"}, &out)
	if out.Stdout != "from mcp\n" || out.Text != "82" && out.Text != "41" {
		t.Errorf("run_code: %+v; want the print and x", out)
	}
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"id": id,
		"code": "import matplotlib.pyplot as plt\nplt.bar(['a', 'b'], [1, 2])\nplt.show()\n1/0"}})
	if err != nil {
		t.Fatal(err)
	}
	var img *mcp.ImageContent
	for _, c := range res.Content {
		if ic, ok := c.(*mcp.ImageContent); ok {
			img = ic
		}
	}
	if img == nil || img.MIMEType != "image/png" || !bytes.HasPrefix(img.Data, []byte("\x89PNG")) {
		t.Errorf("run_code with a chart: %+v; want a PNG image", res.Content)
	}
	if text := mcpCall(t, cs, "run_code", map[string]any{"id": id, "code": "1/0"}, &out); out.Error == nil || out.Error.Name != "ZeroDivisionError" {
		t.Errorf("run_code 1/0: %s; want the error", text)
	}
	if text := mcpCall(t, cs, "run_code", map[string]any{"id": id, "code": "1", "timeout_seconds": 9999}, nil); !strings.Contains(text, "timeout_seconds") {
		t.Errorf("run_code with a bad timeout: %q; want an error naming it", text)
	}
}

// e2bCodeInterpreter runs the unmodified @e2b/code-interpreter package's runCode and contexts against
// e, with E2B's two variables set (internal/testenv/e2bsdk/code.test.mjs).
func e2bCodeInterpreter(t *testing.T, ctx context.Context, e *testenv.Env) {
	dir := testenv.E2BSDK(t)
	cmd := exec.CommandContext(ctx, "node", "--test", "--test-reporter=spec", "--test-concurrency=1", "code.test.mjs")
	cmd.Dir = dir
	cmd.Env = e.E2BEnv(e.APIKey)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Logf("node --test code.test.mjs:\n%s", out.String())
	if err != nil {
		t.Fatalf("the @e2b/code-interpreter tests failed: %v", err)
	}
}

// liar is a server root in the sandbox puts on the interpreter's port: it answers every /execute with
// the body of the mode the file /tmp/mode names.
const liar = `import http.server, os
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    def log_message(self, *a): pass
    def do_POST(self):
        mode = open("/tmp/mode").read().strip()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.end_headers()
        w = self.wfile.write
        if mode == "good":
            w(b'{"type":"stdout","text":"fine\\n","junk":1}\n{"type":"weird"}\n{"type":"result","is_main_result":true,"text":"7"}\n{"type":"end_of_execution"}\n')
        elif mode == "invalid":
            w(b'{"type":"stdout","text":"a"}\nnot json\n')
        elif mode == "long":
            w(b'{"type":"stdout","text":"' + b"a" * (40 << 20) + b'"}\n')
        elif mode == "png":
            w(b'{"type":"result","png":"<script>alert(1)</script>"}\n{"type":"end_of_execution"}\n')
        elif mode == "noend":
            w(b'{"type":"stdout","text":"partial"}\n')
        elif mode == "flood":
            line = b'{"type":"stdout","text":"' + b"f" * 65000 + b'"}\n'
            try:
                while True:
                    w(line)
            except OSError:
                pass
http.server.HTTPServer(("0.0.0.0", 49999), H).serve_forever()
`

// hostileInterpreter: root replaces the interpreter of session id with the liar.
func hostileInterpreter(t *testing.T, ctx context.Context, e *testenv.Env, id string) {
	c := e.Client
	if _, err := c.WriteFile(ctx, id, "/tmp/liar.py", strings.NewReader(liar), 0o644); err != nil {
		t.Fatal(err)
	}
	res := run(t, e, id, airlock.ExecRequest{User: "root", Cmd: []string{"bash", "-c",
		`pkill -f '^python3 /opt/airlock/interpreter'; sleep 0.5; echo good > /tmp/mode; (python3 /tmp/liar.py >/dev/null 2>&1 &); ` +
			`for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/49999) 2>/dev/null && exit 0; sleep 0.1; done; exit 1`}})
	if res.ExitCode != 0 {
		t.Fatalf("start the liar: %+v", res)
	}
	mode := func(m string) {
		if _, err := c.WriteFile(ctx, id, "/tmp/mode", strings.NewReader(m), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The positive control: a well-formed answer passes, its unknown field and type dropped.
	mode("good")
	ex, err := c.RunCode(ctx, id, airlock.RunCodeRequest{Code: "x"}, nil)
	if err != nil || ex.Text() != "7" || strings.Join(ex.Stdout, "") != "fine\n" || ex.Error != nil {
		t.Fatalf("the liar's good answer: %+v %v; want it passed on", ex, err)
	}
	for m, want := range map[string]string{"invalid": "invalid line", "long": "over", "png": "invalid line", "noend": "without its end", "flood": "over"} {
		mode(m)
		start := time.Now()
		ex, err := c.RunCode(ctx, id, airlock.RunCodeRequest{Code: "x"}, nil)
		if err != nil || ex.Error == nil || ex.Error.Name != airlock.CodeErrorInterpreter || !strings.Contains(ex.Error.Value, want) {
			t.Errorf("the liar's %s answer: %+v %v; want an InterpreterError saying %q", m, ex, err, want)
		} else if ex != nil {
			t.Logf("%s: %s (%d stdout chunks, %s)", m, ex.Error.Value, len(ex.Stdout), time.Since(start).Round(time.Millisecond))
		}
	}
	// The server is still the API's: another request is served.
	if _, err := c.GetSession(ctx, id); err != nil {
		t.Errorf("after the liars: %v", err)
	}
}
