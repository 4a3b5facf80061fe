package e2e

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/airlockrun/airlock/internal/template/oci/ocitest"
	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/internal/testenv/registrytest"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// tinyImage is an image of a few host programs (bash and coreutils, with their libraries) and
// /srv/version holding version, working in /srv, as user (none: the platform's), with env.
func tinyImage(t *testing.T, version, user string, env ...string) v1.Image {
	return ocitest.Image(t, v1.Config{Env: env, WorkingDir: "/srv", User: user},
		ocitest.HostPrograms(t, "/usr/bin/bash", "/usr/bin/cat", "/usr/bin/id", "/usr/bin/ls", "/usr/bin/sleep", "/usr/bin/nohup", "/usr/bin/setsid"),
		ocitest.Layer(t, ocitest.Entry{Name: "srv/", Type: tar.TypeDir}, ocitest.Entry{Name: "srv/version", Body: version + "\n"}))
}

// TestImageTemplate: the operator imports an OCI image with the CLI (a docker save tarball, then an OCI
// layout directory as a new version); a sandbox of it boots the image's root in gVisor, not the host's
// /usr, with the image's environment and the sandbox user; what a sandbox and a session record is the
// digest, so a paused session resumes (its process alive) on the image it booted after the name points
// at another, and after the name is removed; name@digest boots that image; bad imports and other
// tenants are refused with clear errors.
func TestImageTemplate(t *testing.T) {
	testenv.RequireSandboxes(t)
	e := testenv.Start(t, testenv.Options{})
	ctx := ctxT(t, 5*time.Minute)
	c := e.Client
	op := []string{"--url", e.URL, "--api-key", e.APIKey}

	one := ocitest.WriteArchive(t, tinyImage(t, "one", "", "GREETING=from-the-image"), "example.test/tiny:1")
	code, out, errOut := runCLI(append(op, "template", "import", "tiny", one)...)
	if code != 0 || !strings.Contains(out, "template tiny now boots tiny@sha256:") {
		t.Fatalf("template import: %d %q %s", code, out, errOut)
	}
	tpl, err := c.GetTemplate(ctx, "tiny")
	if err != nil || tpl.Layers != 2 || tpl.WorkingDir != "/srv" || tpl.Ref != "tiny@"+tpl.Digest {
		t.Fatalf("GetTemplate = %+v, %v", tpl, err)
	}
	refOne := tpl.Ref

	sb := create(t, e, airlock.CreateSandboxRequest{Template: "tiny"})
	if sb.Template != refOne {
		t.Errorf("the sandbox records template %q; want %q", sb.Template, refOne)
	}
	res := sh(t, e, sb.ID, `echo "$GREETING"; cat version; id -un; echo $(ls /usr/bin); test -e /usr/bin/python3 && echo host-usr || echo own-usr`)
	for _, want := range []string{"from-the-image", "one\n", "user\n", "bash cat id ls nohup setsid sleep", "own-usr"} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("output %q lacks %q", res.Stdout, want)
		}
	}

	// A session of it, its process running, paused.
	se, err := c.CreateSession(ctx, airlock.CreateSessionRequest{Template: "tiny"})
	if err != nil {
		t.Fatal(err)
	}
	if se.Template != refOne {
		t.Errorf("the session records template %q; want %q", se.Template, refOne)
	}
	if _, err := c.Exec(ctx, se.ID, airlock.ExecRequest{Cmd: []string{"bash", "-c", "nohup setsid sleep 3600 >/dev/null 2>&1 & echo $! > /tmp/pid"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PauseSession(ctx, se.ID); err != nil {
		t.Fatal(err)
	}

	// A new version, from an OCI image layout directory.
	layout := ocitest.WriteLayout(t, tinyImage(t, "two", "nobody"))
	code, out, errOut = runCLI(append(op, "--json", "template", "import", "tiny", layout)...)
	var two airlock.Template
	if code != 0 || json.Unmarshal([]byte(out), &two) != nil || two.Ref == refOne {
		t.Fatalf("template import of a layout: %d %q %s", code, out, errOut)
	}
	if got := sh(t, e, create(t, e, airlock.CreateSandboxRequest{Template: "tiny"}).ID, "cat /srv/version; id -un").Stdout; got != "two\nnobody\n" {
		t.Errorf("a new sandbox of tiny: %q; want the new version, as its user", got)
	}
	if got := sh(t, e, create(t, e, airlock.CreateSandboxRequest{Template: refOne}).ID, "cat /srv/version").Stdout; got != "one\n" {
		t.Errorf("a sandbox of %s: %q; want the first version", refOne, got)
	}
	code, out, _ = runCLI(append(op, "template", "ls")...)
	if code != 0 || !strings.Contains(out, "default") || !strings.Contains(out, "tiny") || !strings.Contains(out, shortDigestOf(two.Digest)) {
		t.Errorf("template ls: %d %q", code, out)
	}

	// The name goes; the paused session resumes on the image it recorded, its process alive.
	if code, out, errOut := runCLI(append(op, "template", "rm", "tiny")...); code != 0 {
		t.Fatalf("template rm: %d %q %s", code, out, errOut)
	}
	if _, err := c.ResumeSession(ctx, se.ID); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, e, se.ID, `cat /srv/version; kill -0 $(cat /tmp/pid) && echo alive`).Stdout; got != "one\nalive\n" {
		t.Errorf("the resumed session: %q; want the first version, its process alive", got)
	}
	if _, err := c.CreateSandbox(ctx, airlock.CreateSandboxRequest{Template: "tiny"}); !isStatus(err, http.StatusNotFound) {
		t.Errorf("create of a removed template: %v; want 404", err)
	}

	// Refusals, each with a message.
	bad := []struct {
		name, body string
		status     int
		says       string
	}{
		{"junk", "not an image", http.StatusBadRequest, "not a tar"},
		{"default", "", http.StatusBadRequest, "built-in"},
		{"Bad_Name", "", http.StatusBadRequest, "template name"},
	}
	for _, b := range bad {
		_, err := c.ImportTemplate(ctx, b.name, bytes.NewReader([]byte(b.body)))
		if !isStatus(err, b.status) || !strings.Contains(err.Error(), b.says) {
			t.Errorf("import %s: %v; want %d saying %q", b.name, err, b.status, b.says)
		}
	}
	ct, err := c.CreateTenant(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	other := airlock.New(e.URL, airlock.WithAPIKey(ct.APIKey.Key))
	f, err := os.Open(one)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := other.ImportTemplate(ctx, "mine", f); !isStatus(err, http.StatusNotFound) {
		t.Errorf("import by a tenant that is not the operator: %v; want 404", err)
	}
	if l, err := other.ListTemplates(ctx); err != nil || len(l.Templates) < 1 || l.Templates[0].Name != "default" {
		t.Errorf("another tenant lists templates: %+v, %v", l, err)
	}
}

func shortDigestOf(d string) string { return d[:len("sha256:")+12] }

// isStatus reports whether err is an API error with HTTP status code.
func isStatus(err error, code int) bool {
	var ae *airlock.APIError
	return asAPIError(err, &ae) && ae.Status == code
}

// TestPullTemplate: the operator pulls an image from a real registry that wants credentials, the
// password in one of its secrets; a sandbox boots it. Without insecure, the plain-HTTP registry is
// refused; with a wrong secret the registry refuses.
func TestPullTemplate(t *testing.T) {
	testenv.RequireSandboxes(t)
	e := testenv.Start(t, testenv.Options{})
	ctx := ctxT(t, 3*time.Minute)
	c := e.Client
	reg := registrytest.Start(t, "puller", "registry-pass")
	ref := reg.Push(t, tinyImage(t, "pulled", ""), "team/tiny:1")
	if _, err := c.CreateSecret(ctx, "regpass", "registry-pass"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateSecret(ctx, "wrongpass", "nope"); err != nil {
		t.Fatal(err)
	}
	req := airlock.PullTemplateRequest{Image: ref, Username: "puller", PasswordSecret: "regpass"}
	if _, err := c.PullTemplate(ctx, "pulled", req); !isStatus(err, http.StatusConflict) || !strings.Contains(err.Error(), "insecure") {
		t.Errorf("pull from a plain-HTTP registry not named insecure: %v; want 409 saying insecure", err)
	}
	req.Insecure = true
	wrong := req
	wrong.PasswordSecret = "wrongpass"
	if _, err := c.PullTemplate(ctx, "pulled", wrong); !isStatus(err, http.StatusForbidden) {
		t.Errorf("pull with a wrong password: %v; want 403", err)
	}
	op := []string{"--url", e.URL, "--api-key", e.APIKey}
	code, out, errOut := runCLI(append(op, "template", "pull", "pulled", ref, "--insecure", "--username", "puller", "--password-secret", "regpass")...)
	if code != 0 || !strings.Contains(out, "template pulled now boots pulled@sha256:") {
		t.Fatalf("template pull: %d %q %s", code, out, errOut)
	}
	sb := create(t, e, airlock.CreateSandboxRequest{Template: "pulled"})
	if got := sh(t, e, sb.ID, "cat /srv/version").Stdout; got != "pulled\n" {
		t.Errorf("a sandbox of the pulled template: %q", got)
	}
	if strings.Contains(e.Logs(), "registry-pass") {
		t.Error("the registry password is in the server's log")
	}
}

// TestTemplateGC: removing a template's name says what still uses its image (a running sandbox, a
// paused session); the image stays on the node while they do (the session resumes on it, its process
// alive) and goes, with its layers, once nothing does.
func TestTemplateGC(t *testing.T) {
	testenv.RequireSandboxes(t)
	e := testenv.Start(t, testenv.Options{GCInterval: 200 * time.Millisecond, ImageGCGrace: time.Second})
	ctx := ctxT(t, 5*time.Minute)
	c := e.Client
	op := []string{"--url", e.URL, "--api-key", e.APIKey}
	img := tinyImage(t, "collected", "")
	if code, out, errOut := runCLI(append(op, "template", "import", "gc", ocitest.WriteLayout(t, img))...); code != 0 {
		t.Fatalf("template import: %d %q %s", code, out, errOut)
	}
	tpl, err := c.GetTemplate(ctx, "gc")
	if err != nil {
		t.Fatal(err)
	}
	// Where the node keeps the image's record and its own layer (the version file's).
	var records []string
	filepath.WalkDir(e.DataDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == strings.Replace(tpl.Digest, ":", "-", 1)+".json" && filepath.Base(filepath.Dir(p)) == "images" {
			records = append(records, p)
		}
		return nil
	})
	if len(records) != 1 {
		t.Fatalf("the image's record under %s: %v; want one", e.DataDir, records)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	diffID, err := layers[1].DiffID()
	if err != nil {
		t.Fatal(err)
	}
	layerDir := filepath.Join(filepath.Dir(filepath.Dir(records[0])), "layers", "sha256-"+diffID.Hex)
	held := func() bool {
		_, err1 := os.Stat(records[0])
		_, err2 := os.Stat(layerDir)
		return err1 == nil && err2 == nil
	}
	if !held() {
		t.Fatalf("no %s or %s after the import", records[0], layerDir)
	}

	sb := create(t, e, airlock.CreateSandboxRequest{Template: "gc"})
	se, err := c.CreateSession(ctx, airlock.CreateSessionRequest{Template: "gc"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, se.ID, airlock.ExecRequest{Cmd: []string{"bash", "-c", "nohup setsid sleep 3600 >/dev/null 2>&1 & echo $! > /tmp/pid"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PauseSession(ctx, se.ID); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(append(op, "template", "rm", "gc")...)
	// The paused session's last sandbox may still be on its way out: it counts while it is.
	if code != 0 || !strings.Contains(out, "1 session ("+se.ID+")") || !strings.Contains(out, sb.ID) {
		t.Fatalf("template rm: %d %q %s; want the session and the sandbox that use its image", code, out, errOut)
	}
	time.Sleep(2 * time.Second) // GC passes, several graces
	if !held() {
		t.Fatal("the image went while a sandbox and a session used it")
	}
	if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if !held() {
		t.Fatal("the image went while a paused session used it")
	}
	if _, err := c.ResumeSession(ctx, se.ID); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, e, se.ID, `cat /srv/version; kill -0 $(cat /tmp/pid) && echo alive`).Stdout; got != "collected\nalive\n" {
		t.Errorf("the resumed session: %q; want its image's file and its process alive", got)
	}
	if err := c.DeleteSession(ctx, se.ID); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for held() && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if held() {
		t.Fatalf("the image is still on the node a minute after nothing used it\n%s", e.Logs())
	}
	if _, err := c.CreateSandbox(ctx, airlock.CreateSandboxRequest{Template: tpl.Ref}); err == nil {
		t.Errorf("a sandbox of %s after its image was collected: created; want an error", tpl.Ref)
	}
}

// TestDefaultImageTemplate: the default template is an image installed at start (from the archive
// scripts/install.sh builds), no longer the host's live /usr, so a host upgrade no longer reaches
// sessions. Sessions paused before: one of the built-in template from before any image (legacy), one
// of the first default image and one of a custom template. Then the default image is rebuilt (a new
// archive, installed at the next start) and a file under the host's /usr changes. Each session
// resumes with its process alive: the image sessions on the image they booted, which the host's change
// does not reach; the legacy one still on the host's /usr, which it does (the hazard, as a positive
// control). New sandboxes of "default" boot the new image; an unchanged archive is not installed again.
func TestDefaultImageTemplate(t *testing.T) {
	testenv.RequireSandboxes(t)
	ctx := ctxT(t, 5*time.Minute)
	dir, err := os.MkdirTemp("", "airlock-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	data := filepath.Join(dir, "data")
	archive := filepath.Join(dir, "default-image.tar")
	install := func(version string) {
		t.Helper()
		// Its command (Cmd) is what a process that names none runs.
		img := ocitest.Image(t, v1.Config{WorkingDir: "/srv", Cmd: []string{"cat", "/srv/version"}},
			ocitest.HostPrograms(t, "/usr/bin/bash", "/usr/bin/cat", "/usr/bin/id", "/usr/bin/sleep", "/usr/bin/nohup", "/usr/bin/setsid"),
			ocitest.Layer(t, ocitest.Entry{Name: "srv/", Type: tar.TypeDir}, ocitest.Entry{Name: "srv/version", Body: version + "\n"}))
		src := ocitest.WriteArchive(t, img, "airlock.test/default:"+version)
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(archive+".new", b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(archive+".new", archive); err != nil {
			t.Fatal(err)
		}
	}
	// pausedWithProcess creates a session of tpl, starts a process in it and pauses it.
	pausedWithProcess := func(e *testenv.Env, tpl string) *airlock.Session {
		t.Helper()
		se, err := e.Client.CreateSession(ctx, airlock.CreateSessionRequest{Template: tpl})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Client.Exec(ctx, se.ID, airlock.ExecRequest{Cmd: []string{"bash", "-c", "nohup setsid sleep 3600 >/dev/null 2>&1 & echo $! > /tmp/pid"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Client.PauseSession(ctx, se.ID); err != nil {
			t.Fatal(err)
		}
		return se
	}

	// Before any image: the built-in template.
	e := testenv.Start(t, testenv.Options{DataDir: data})
	if tpl, err := e.Client.GetTemplate(ctx, "default"); err != nil || !tpl.Builtin || tpl.Digest != "" {
		t.Fatalf("the default template with no image: %+v, %v; want the built-in one", tpl, err)
	}
	legacy := pausedWithProcess(e, "")
	if legacy.Template != "default" {
		t.Errorf("a session of the built-in template records %q; want default", legacy.Template)
	}
	host := create(t, e, airlock.CreateSandboxRequest{})
	if _, err := e.Client.Exec(ctx, host.ID, airlock.ExecRequest{}); !isStatus(err, http.StatusBadRequest) || !strings.Contains(err.Error(), "Entrypoint and Cmd") {
		t.Errorf("exec naming no command in a sandbox of the host template: %v; want 400 saying it has none", err)
	}
	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}

	// The first image.
	install("one")
	e = testenv.Start(t, testenv.Options{DataDir: data, DefaultImage: archive})
	first, err := e.Client.GetTemplate(ctx, "default")
	if err != nil || !first.Builtin || first.Digest == "" || first.Ref != "default@"+first.Digest {
		t.Fatalf("the default template after an image was installed: %+v, %v", first, err)
	}
	sb := create(t, e, airlock.CreateSandboxRequest{})
	if sb.Template != first.Ref {
		t.Errorf("a sandbox of the default template records %q; want %q", sb.Template, first.Ref)
	}
	if got := sh(t, e, sb.ID, "cat /srv/version; id -un; test -e /usr/bin/python3 && echo host-usr || echo own-usr").Stdout; got != "one\nuser\nown-usr\n" {
		t.Errorf("a sandbox of the default image: %q; want its own root, as the sandbox user", got)
	}
	if res, err := e.Client.Exec(ctx, sb.ID, airlock.ExecRequest{}); err != nil || res.Stdout != "one\n" {
		t.Errorf("exec naming no command: %+v, %v; want the image's Cmd", res, err)
	}
	ofImage := pausedWithProcess(e, "")
	tiny := ocitest.WriteArchive(t, tinyImage(t, "custom", ""), "example.test/custom:1")
	op := []string{"--url", e.URL, "--api-key", e.APIKey}
	if code, out, errOut := runCLI(append(op, "template", "import", "custom", tiny)...); code != 0 {
		t.Fatalf("template import: %d %q %s", code, out, errOut)
	}
	custom := pausedWithProcess(e, "custom")
	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}

	// The default image is rebuilt; the host is upgraded.
	install("two")
	marker, err := os.MkdirTemp("/usr/share", "airlock-host-upgrade-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(marker) })
	e = testenv.Start(t, testenv.Options{DataDir: data, DefaultImage: archive})
	second, err := e.Client.GetTemplate(ctx, "default")
	if err != nil || second.Digest == "" || second.Digest == first.Digest {
		t.Fatalf("the default template after a new image: %+v, %v; want another digest than %s", second, err, first.Digest)
	}
	probe := fmt.Sprintf(`cat /srv/version 2>/dev/null || echo host; kill -0 $(cat /tmp/pid) && echo alive; test -e %s && echo upgraded || echo untouched`, marker)
	for _, c := range []struct {
		se   *airlock.Session
		want string
	}{
		{ofImage, "one\nalive\nuntouched\n"},
		{custom, "custom\nalive\nuntouched\n"},
		{legacy, "host\nalive\nupgraded\n"}, // the built-in template: the host's live /usr
	} {
		if _, err := e.Client.ResumeSession(ctx, c.se.ID); err != nil {
			t.Fatalf("resume %s (of %s): %v", c.se.ID, c.se.Template, err)
		}
		if got := sh(t, e, c.se.ID, probe).Stdout; got != c.want {
			t.Errorf("session of %s resumed: %q; want %q", c.se.Template, got, c.want)
		}
	}
	if got := sh(t, e, create(t, e, airlock.CreateSandboxRequest{}).ID, "cat /srv/version").Stdout; got != "two\n" {
		t.Errorf("a new sandbox of the default template: %q; want the new image", got)
	}
	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}
	// An unchanged archive is not installed again.
	e = testenv.Start(t, testenv.Options{DataDir: data, DefaultImage: archive})
	if again, err := e.Client.GetTemplate(ctx, "default"); err != nil || again.Digest != second.Digest || again.UpdatedAt == nil || second.UpdatedAt == nil || !again.UpdatedAt.Equal(*second.UpdatedAt) {
		t.Errorf("the default template after a start with the same archive: %+v, %v; want it as it was (%s)", again, err, second.Digest)
	}
	if strings.Contains(e.Logs(), "default template installed") {
		t.Errorf("the unchanged archive was installed again")
	}
}
