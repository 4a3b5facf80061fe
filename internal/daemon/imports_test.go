package daemon

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports keeps the daemon tree (daemon, proto, link) free of imports from the rest of Airlock:
// only internal/errdefs, the daemon tree itself, the standard library and a few vetted modules.
func TestImports(t *testing.T) {
	const module = "github.com/airlockrun/airlock/"
	allowed := []string{
		module + "internal/errdefs",
		module + "internal/daemon",
		"golang.org/x/sys/",
		"github.com/creack/pty",
		"github.com/google/go-cmp/", // tests only
	}
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			first, _, _ := strings.Cut(p, "/")
			if !strings.Contains(first, ".") {
				continue // standard library
			}
			ok := false
			for _, a := range allowed {
				if p == strings.TrimSuffix(a, "/") || strings.HasPrefix(p, a) || strings.HasPrefix(p, a+"/") {
					ok = true
				}
			}
			if !ok {
				t.Errorf("%s imports %s, which the in-sandbox daemon tree must not depend on", path, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
