package bench

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/airlockrun/airlock/internal/testenv"
)

// BenchmarkPythonExecTrue: the round trip of a run-to-completion exec of `true` in a running sandbox
// through the Python SDK (sdk/python/tests/bench_exec.py), beside BenchmarkExecTrue's Go SDK.
func BenchmarkPythonExecTrue(b *testing.B) {
	e := testenv.Start(b, testenv.Options{})
	sdk, err := filepath.Abs("../../sdk/python")
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.CommandContext(context.Background(), "/usr/bin/python3", "tests/bench_exec.py", strconv.Itoa(b.N))
	cmd.Dir = sdk
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(sdk, "src"), "AIRLOCK_URL="+e.URL, "AIRLOCK_API_KEY="+e.APIKey)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		b.Fatalf("bench_exec.py: %v\n%s", err, errOut.String())
	}
	reportPrinted(b, out.String())
}
