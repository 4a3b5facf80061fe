//go:build !race

// Built without the race detector only: installing the 740 MB image under it takes minutes, so
// scripts/test.sh runs this test in its second pass, without it.

package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/app"
	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// TestInstalledDefaultImage: the default template's image that scripts/install.sh builds (Debian 12,
// from Debian's packages) installs at start, and a sandbox of "default" boots it with what agents reach
// for: python3 and pip, node and npm, git, curl, a C compiler; as the sandbox user, in its home.
func TestInstalledDefaultImage(t *testing.T) {
	testenv.RequireSandboxes(t)
	img := filepath.Join("/usr/local/lib/airlock", app.DefaultImageName)
	if _, err := os.Stat(img); err != nil {
		t.Skipf("needs the default template's image, which scripts/install.sh builds: %v", err)
	}
	e := testenv.Start(t, testenv.Options{DefaultImage: img})
	ctx := ctxT(t, 2*time.Minute)
	tpl, err := e.Client.GetTemplate(ctx, "default")
	if err != nil || !tpl.Builtin || tpl.Digest == "" {
		t.Fatalf("the default template: %+v, %v; want the installed image", tpl, err)
	}
	sb := create(t, e, airlock.CreateSandboxRequest{})
	if sb.Template != tpl.Ref {
		t.Errorf("the sandbox records %q; want %q", sb.Template, tpl.Ref)
	}
	res := sh(t, e, sb.ID, `python3 -c 'print(6*7)'; pip3 --version | cut -d' ' -f1; node -e 'console.log(6*7)'; npm --version >/dev/null && echo npm; `+
		`git --version | cut -d' ' -f1-2; curl --version | cut -d' ' -f1 | head -1; printf 'int main(void){return 42;}' > /tmp/a.c && cc -o /tmp/a /tmp/a.c; /tmp/a; echo $?; id -un; pwd`)
	if want := "42\npip\n42\nnpm\ngit version\ncurl\n42\nuser\n/home/user\n"; res.Stdout != want {
		t.Errorf("a sandbox of the default image: %q (stderr %q); want %q", res.Stdout, res.Stderr, want)
	}
}
