package archtest

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/airlockrun/airlock"

var update = flag.Bool("update", false, "rewrite docs/ARCHITECTURE.md's drawing of the parts and testdata/structure.baseline")

// repo loads the parts file and the module's package graph (with export data for Measure).
func repo(t *testing.T, export bool) (*Parts, *Graph) {
	t.Helper()
	g, err := Load(".", export)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(g.Root, "docs", "ARCHITECTURE.parts"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := ParseParts("docs/ARCHITECTURE.parts", f)
	if err != nil {
		t.Fatal(err)
	}
	return p, g
}

// TestParts holds every package of the module, and every import, to docs/ARCHITECTURE.parts.
func TestParts(t *testing.T) {
	p, g := repo(t, false)
	for _, prob := range Check(p, g) {
		t.Error(prob)
	}
}

const (
	drawBegin = "<!-- parts: begin; drawn from ARCHITECTURE.parts by go test ./internal/archtest -run TestDrawing -update -->\n"
	drawEnd   = "<!-- parts: end -->\n"
)

// TestDrawing checks that docs/ARCHITECTURE.md draws the parts file as it is.
func TestDrawing(t *testing.T) {
	p, g := repo(t, false)
	path := filepath.Join(g.Root, "docs", "ARCHITECTURE.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok1 := strings.Cut(string(doc), drawBegin)
	drawn, after, ok2 := strings.Cut(rest, drawEnd)
	if !ok1 || !ok2 {
		t.Fatalf("docs/ARCHITECTURE.md has no drawing of the parts between %q and %q", drawBegin, drawEnd)
	}
	want := "```\n" + Draw(p) + "```\n"
	if drawn == want {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(before+drawBegin+want+drawEnd+after), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Log("rewrote the drawing in docs/ARCHITECTURE.md")
		return
	}
	t.Errorf("docs/ARCHITECTURE.md's drawing of the parts differs from docs/ARCHITECTURE.parts; redraw it with go test ./internal/archtest -run TestDrawing -update\ngot:\n%s\nwant:\n%s", drawn, want)
}

const baselineFile = "testdata/structure.baseline"

const baselineHeader = `# What exceeds issue 41's structure limits today: packages over 5,000 lines of non-test code, types
# with more than 40 methods (the SDKs' clients aside), functions over 120 lines outside tests.
# TestStructureRatchet fails when a figure here grows or something new goes over a limit, and when an
# entry is back within its limit (delete it). After cutting a figure down, lower it here with
#   go test ./internal/archtest -run TestStructureRatchet -update
# The control plane's imports of what the node owns are held by docs/ARCHITECTURE.parts' exceptions.
# The whole report: go run ./internal/archtest/cmd/structure
`

// TestStructureRatchet keeps the structure's debt from growing: see testdata/structure.baseline.
func TestStructureRatchet(t *testing.T) {
	p, g := repo(t, true)
	s, err := Measure(p, g, DefaultOptions)
	if err != nil {
		t.Fatal(err)
	}
	now := s.Debt()
	if *update {
		if err := os.WriteFile(baselineFile, []byte(baselineHeader+strings.Join(now, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote %s", baselineFile)
		return
	}
	base, err := os.ReadFile(baselineFile)
	if err != nil {
		t.Fatal(err)
	}
	worse, stale, better := Ratchet(strings.Split(string(base), "\n"), now)
	for _, w := range worse {
		t.Errorf("worse than %s: %s: split it (the redesign of issue 41 cuts this debt; new code must not add to it)", baselineFile, w)
	}
	for _, s := range stale {
		t.Errorf("%s lists %q, no longer over its limit (or gone): delete the line", baselineFile, s)
	}
	for _, b := range better {
		t.Logf("better than %s: %s: lower it with -update", baselineFile, b)
	}
	var report bytes.Buffer
	s.Report(&report)
	t.Logf("structure:\n%s", report.String())
}

// TestDaemonBinary builds the daemon's own binary as scripts/install.sh does and reports its size: it
// links only the daemon's packages and the error taxonomy (internal/errdefs and the public api/errcode
// it takes its sentinels from: the parts file's only-rule), so it stays far below the server's.
func TestDaemonBinary(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", module+"/cmd/airlock-daemon").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, module+"/") && dep != module+"/cmd/airlock-daemon" &&
			!strings.HasPrefix(dep, module+"/internal/daemon/") && dep != module+"/internal/daemon" && dep != module+"/internal/errdefs" &&
			dep != module+"/api/errcode" {
			t.Errorf("cmd/airlock-daemon links %s; the daemon's binary links only the daemon's packages", dep)
		}
	}
	bin := filepath.Join(t.TempDir(), "airlock-daemon")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, module+"/cmd/airlock-daemon")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v: %s", err, out)
	}
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("airlock-daemon: %.1f MB", float64(fi.Size())/1e6)
	if fi.Size() > 15e6 {
		t.Errorf("airlock-daemon is %.1f MB; want it under 15 MB", float64(fi.Size())/1e6)
	}
}
