package e2e

import (
	"archive/tar"
	"context"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/airlockrun/airlock/internal/template"
	"github.com/airlockrun/airlock/internal/template/oci/ocitest"
	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// TestImageTemplate: a sandbox of an image template boots the image's root in gVisor, not the host's
// /usr: its programs and files are the image's, its environment the image's, and the platform's layer
// gives it the sandbox user and the daemon; the default template still boots beside it.
func TestImageTemplate(t *testing.T) {
	testenv.RequireSandboxes(t)
	e := testenv.Start(t, testenv.Options{})
	img := ocitest.Image(t, v1.Config{Env: []string{"GREETING=from-the-image"}},
		ocitest.HostPrograms(t, "/usr/bin/bash", "/usr/bin/cat", "/usr/bin/id", "/usr/bin/ls"),
		ocitest.Layer(t, ocitest.Entry{Name: "srv/", Type: tar.TypeDir}, ocitest.Entry{Name: "srv/hello", Body: "hello from the image\n"}))
	ref, err := template.NewCatalog(filepath.Join(e.DataDir, "templates")).Import(context.Background(), "tiny", ocitest.WriteLayout(t, img))
	if err != nil {
		t.Fatal(err)
	}
	sb := create(t, e, airlock.CreateSandboxRequest{Template: "tiny"})
	res := sh(t, e, sb.ID, `echo "$GREETING"; cat /srv/hello; id -un; echo $(ls /usr/bin); test -e /usr/bin/python3 && echo host-usr || echo own-usr`)
	out := res.Stdout
	for _, want := range []string{"from-the-image", "hello from the image", "user\n", "own-usr"} {
		if !strings.Contains(out, want) {
			t.Errorf("output %q lacks %q", out, want)
		}
	}
	t.Logf("%s booted; its /usr/bin: %s", ref, out)
	def := create(t, e, airlock.CreateSandboxRequest{})
	if got := sh(t, e, def.ID, "test -e /usr/bin/python3 && echo host-usr").Stdout; !strings.Contains(got, "host-usr") {
		t.Errorf("the default template: %q", got)
	}
}
