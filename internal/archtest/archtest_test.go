package archtest

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/airlockrun/airlock"

var update = flag.Bool("update", false, "rewrite docs/ARCHITECTURE.md's drawing of the parts")

// repo loads the parts file and the module's package graph.
func repo(t *testing.T) (*Parts, *Graph) {
	t.Helper()
	g, err := Load(".")
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
	p, g := repo(t)
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
	p, g := repo(t)
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

// TestDaemonBinary builds the daemon's own binary as scripts/install.sh does and reports its size: it
// links only the daemon's packages (the parts file's only-rule), so it stays far below the server's.
func TestDaemonBinary(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", module+"/cmd/airlock-daemon").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, module+"/") && dep != module+"/cmd/airlock-daemon" &&
			!strings.HasPrefix(dep, module+"/internal/daemon/") && dep != module+"/internal/daemon" && dep != module+"/internal/errdefs" {
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
