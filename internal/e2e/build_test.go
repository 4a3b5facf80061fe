package e2e

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/airlockrun/airlock/internal/template/oci/ocitest"
	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// buildDockerfile exercises every supported instruction over the base image "buildbase".
const buildDockerfile = `# syntax is Docker's; a comment
ARG BASE=buildbase
FROM ${BASE}
ARG GREETING=hello
ENV APP_HOME=/app \
    MODE=test
WORKDIR $APP_HOME
COPY app/ ./
COPY --chmod=0755 run.sh /usr/local/bin/run
COPY run.sh /tmp/
RUN echo "$GREETING from $(id -un) in $PWD" > built.txt && rm /srv/version && mkdir -p /opt/made
USER user
RUN id -un > /tmp/whoami
EXPOSE 8080
LABEL org.example.kind=test
CMD ["run"]
`

// writeContext writes a build context directory: the Dockerfile df and files.
func writeContext(t *testing.T, df string, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	files["Dockerfile"] = df
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestBuildTemplate: the operator builds a Dockerfile with the CLI over an imported image; each RUN runs
// in a sandbox (as root, then as USER), COPY keeps the image's directories as they are (/tmp stays
// sticky), a file a RUN removed is gone, and the built template boots with the Dockerfile's env, working
// directory, user and command, without the build sandboxes' interception CA. A rebuild takes every step
// from the cache; a changed file re-runs its COPY and the steps after. The image exports and imports as
// the same digest. A failing RUN, an unsupported instruction and a file named like a whiteout are refused
// naming the line; other tenants cannot build (404, as for every operator route).
func TestBuildTemplate(t *testing.T) {
	testenv.RequireSandboxes(t)
	up := startUpstream(t)
	e := testenv.Start(t, testenv.Options{Hosts: map[string][]netip.Addr{"api.example.test": {up.IP}}})
	ctx := ctxT(t, 10*time.Minute)
	c := e.Client
	op := []string{"--url", e.URL, "--api-key", e.APIKey}

	base := ocitest.WriteArchive(t, ocitest.Image(t, v1.Config{WorkingDir: "/srv"},
		ocitest.HostPrograms(t, "/usr/bin/bash", "/usr/bin/cat", "/usr/bin/id", "/usr/bin/ls", "/usr/bin/mkdir", "/usr/bin/rm", "/usr/bin/sleep",
			"/usr/bin/ln", "/usr/bin/mkfifo", "/usr/bin/grep"),
		ocitest.Layer(t, ocitest.Entry{Name: "srv/", Type: tar.TypeDir}, ocitest.Entry{Name: "srv/version", Body: "base\n"},
			ocitest.Entry{Name: "tmp/", Type: tar.TypeDir, Mode: 0o1777})), "example.test/buildbase:1")
	if code, out, errOut := runCLI(append(op, "template", "import", "buildbase", base)...); code != 0 {
		t.Fatalf("import the base: %d %q %s", code, out, errOut)
	}
	dir := writeContext(t, buildDockerfile, map[string]string{"app/main.txt": "main\n", "app/sub/deep.txt": "deep\n", "run.sh": "#!/bin/sh\necho running\n"})

	code, out, errOut := runCLI(append(op, "template", "build", "built", "--build-arg", "GREETING=hi", dir)...)
	if code != 0 || !strings.Contains(out, "Step 1/14 : ARG BASE=buildbase") || !strings.Contains(out, "template built now boots built@sha256:") {
		t.Fatalf("template build: %d %q %s", code, out, errOut)
	}
	t.Logf("build output:\n%s", out)
	tpl, err := c.GetTemplate(ctx, "built")
	if err != nil {
		t.Fatal(err)
	}
	if tpl.WorkingDir != "/app" || tpl.User != "user" || strings.Join(tpl.Cmd, " ") != "run" || !strings.Contains(strings.Join(tpl.Env, " "), "MODE=test") {
		t.Errorf("built template %+v; want /app, user, CMD run, MODE=test", tpl)
	}
	sb := create(t, e, airlock.CreateSandboxRequest{Template: "built"})
	res := sh(t, e, sb.ID, `cat built.txt main.txt sub/deep.txt /tmp/whoami; pwd; id -un; echo "$MODE"; run
for d in /tmp /opt/made; do x=$(ls -ld $d); echo "${x:0:10}"; done; ls /srv; read -r l < /tmp/run.sh; echo "$l"
n=0; while read -r l; do [[ $l == *BEGIN* ]] && n=$((n+1)); done < /etc/ssl/certs/ca-certificates.crt; echo $n`)
	want := "hi from root in /app\nmain\ndeep\nuser\n/app\nuser\ntest\nrunning\ndrwxrwxrwt\ndrwxr-xr-x\n#!/bin/sh\n1\n"
	if res.Stdout != want {
		t.Errorf("a sandbox of the built template:\n%s\nwant:\n%s(stderr %q)", res.Stdout, want, res.Stderr)
	}

	// Unchanged: every step from the cache, the same image.
	code, out, errOut = runCLI(append(op, "template", "build", "built", "--build-arg", "GREETING=hi", dir)...)
	if code != 0 || strings.Count(out, "Using cache") != 6 || !strings.Contains(out, tpl.Ref) {
		t.Errorf("rebuild: %d %q %s; want 6 steps from the cache and %s again", code, out, errOut, tpl.Ref)
	}
	// A changed file: its COPY and what follows run again.
	if err := os.WriteFile(filepath.Join(dir, "app", "main.txt"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCLI(append(op, "template", "build", "built", "--build-arg", "GREETING=hi", dir)...)
	if code != 0 || strings.Count(out, "Using cache") != 1 || strings.Contains(out, tpl.Ref) {
		t.Errorf("build after a change: %d %q %s; want only WORKDIR from the cache and a new image", code, out, errOut)
	}
	if got := sh(t, e, create(t, e, airlock.CreateSandboxRequest{Template: "built"}).ID, "cat main.txt").Stdout; got != "changed\n" {
		t.Errorf("the rebuilt template's main.txt: %q", got)
	}

	// Export and import again: the same image.
	archive := filepath.Join(t.TempDir(), "built.tar")
	if code, out, errOut := runCLI(append(op, "template", "export", tpl.Ref, "-o", archive)...); code != 0 {
		t.Fatalf("template export: %d %q %s", code, out, errOut)
	}
	code, out, errOut = runCLI(append(op, "template", "import", "built-again", archive)...)
	if code != 0 || !strings.Contains(out, "built-again@"+tpl.Digest) {
		t.Errorf("import of the export: %d %q %s; want digest %s", code, out, errOut, tpl.Digest)
	}

	// A hostile build, root in its RUN: links that point at the host's root and files, a FIFO (gVisor
	// keeps a FIFO in its own kernel: not in the image, and never anything else), a hard link; a COPY through a link climbing out of the image stays in the image, the host untouched. Egress
	// reaches only --allow's hosts: the same RUN fails without it (the positive control passes with it).
	escape := fmt.Sprintf("airlock-build-escape-%d", time.Now().UnixNano())
	hostile := writeContext(t, `FROM buildbase
RUN ln -s / /srv/hostroot && ln -s ../../../../../../etc /srv/up && ln -s /etc/shadow /srv/shadow && mkfifo /srv/fifo && ln /srv/version /srv/hard
COPY marker.txt /srv/hostroot/tmp/`+escape+`
COPY marker.txt /srv/up/`+escape+`
RUN exec 3<>/dev/tcp/api.example.test/80 && printf 'GET /echo HTTP/1.0\r\nHost: api.example.test\r\n\r\n' >&3 && cat <&3 > /srv/fetched
`, map[string]string{"marker.txt": "marker\n"})
	if code, out, errOut := runCLI(append(op, "template", "build", "hostile", "--allow", "api.example.test", hostile)...); code != 0 {
		t.Fatalf("the hostile build with --allow: %d %q %s", code, out, errOut)
	}
	for _, p := range []string{"/tmp/" + escape, "/etc/" + escape} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the host's %s after a build's COPY through an image's link: %v; want nothing there", p, err)
		}
	}
	res = sh(t, e, create(t, e, airlock.CreateSandboxRequest{Template: "hostile"}).ID, `cat /tmp/`+escape+` /etc/`+escape+`
[[ -e /srv/fifo && ! -p /srv/fifo ]] && echo not-a-fifo; [[ /srv/hard -ef /srv/version ]] && echo hard; x=$(ls -ld /srv/hostroot); echo "${x:0:1}"
grep -c `+upstreamMarker+` /srv/fetched`)
	if want := "marker\nmarker\nhard\nl\n1\n"; res.Stdout != want {
		t.Errorf("a sandbox of the hostile build:\n%s\nwant:\n%s(stderr %q)", res.Stdout, want, res.Stderr)
	}
	if code, out, errOut := runCLI(append(op, "template", "build", "hostile", "--no-cache", hostile)...); code == 0 || !strings.Contains(out+errOut, "line 5: RUN") {
		t.Errorf("the hostile build without --allow: %d %q %s; want its RUN to fail (no egress)", code, out, errOut)
	}

	// Refusals, each naming what and where.
	fails := []struct {
		df     string
		status int
		says   string
	}{
		{"FROM buildbase\nRUN exit 3\n", 0, "line 2: RUN exit 3: exit code 3"},
		{"FROM buildbase\nHEALTHCHECK CMD true\n", http.StatusBadRequest, "line 2: HEALTHCHECK is not supported"},
		{"FROM buildbase\nRUN touch /srv/.wh.version\n", 0, ".wh.version"},
		{"FROM no-such-template\n", http.StatusNotFound, "line 1"},
		{"FROM buildbase\nCOPY missing.txt /\n", http.StatusBadRequest, `line 2: COPY source "missing.txt"`},
	}
	for _, f := range fails {
		ctxDir := writeContext(t, f.df, map[string]string{})
		var buf bytes.Buffer
		if err := writeTarDir(&buf, ctxDir); err != nil {
			t.Fatal(err)
		}
		_, err := c.BuildTemplate(ctx, "bad", &buf, airlock.BuildTemplateOptions{})
		if err == nil || !strings.Contains(err.Error(), f.says) || f.status != 0 && !isStatus(err, f.status) {
			t.Errorf("build of %q: %v; want an error (status %d) saying %q", f.df, err, f.status, f.says)
		}
	}
	if _, err := c.GetTemplate(ctx, "bad"); !isStatus(err, http.StatusNotFound) {
		t.Errorf("after failed builds, template bad: %v; want none", err)
	}
	// Another tenant cannot build: to it the operator's routes are not there.
	ct, err := c.CreateTenant(ctx, "builder")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := writeTarDir(&buf, dir); err != nil {
		t.Fatal(err)
	}
	other := airlock.New(e.URL, airlock.WithAPIKey(ct.APIKey.Key))
	if _, err := other.BuildTemplate(ctx, "theirs", &buf, airlock.BuildTemplateOptions{}); !isStatus(err, http.StatusNotFound) {
		t.Errorf("a build by another tenant: %v; want 404", err)
	}
}

// writeTarDir writes a tar of the files under dir, names relative to it.
func writeTarDir(w *bytes.Buffer, dir string) error {
	tw := tar.NewWriter(w)
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			_, err = tw.Write(b)
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// TestTemplateStartCommand: a template built with a start command and a ready check hands over every
// sandbox and session with the command already running and serving, restored from the build's start
// snapshot (the process started before the sandbox was asked for), each with its own environment and
// its own interception CA; a start command that exits before it is ready fails the build, naming it.
// Creates after the first take a sandbox the warm pool restored ahead: the same, and it reached nothing
// before a create took it (its gateway registration and policy come with the create).
func TestTemplateStartCommand(t *testing.T) {
	n := startNetEnv(t)
	e := n.Env
	before, err := testenv.TakeFootprint(e.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 10*time.Minute)
	c := e.Client
	op := []string{"--url", e.URL, "--api-key", e.APIKey}
	base := ocitest.WriteArchive(t, ocitest.Image(t, v1.Config{WorkingDir: "/srv"},
		ocitest.HostPrograms(t, "/usr/bin/bash", "/usr/bin/cat", "/usr/bin/sleep"),
		ocitest.Layer(t, ocitest.Entry{Name: "srv/", Type: tar.TypeDir})), "example.test/startbase:1")
	if code, out, errOut := runCLI(append(op, "template", "import", "startbase", base)...); code != 0 {
		t.Fatalf("import the base: %d %q %s", code, out, errOut)
	}
	server, err := os.ReadFile(testenv.PortServer(t))
	if err != nil {
		t.Fatal(err)
	}
	dir := writeContext(t, "FROM startbase\nCOPY --chmod=0755 portserver /usr/local/bin/portserver\n", map[string]string{"portserver": string(server)})
	code, out, errOut := runCLI(append(op, "template", "build", "served", dir,
		// With the server, a prober that asks the upstream through the gateway every 50 ms and notes
		// when it first got through (only once a create's policy allows it).
		"--start-cmd", `echo "$EPOCHREALTIME" > /tmp/started
(until (exec 3<>/dev/tcp/`+n.up.IP.String()+`/80 && printf 'GET /warm HTTP/1.0\r\nHost: api.example.test\r\n\r\n' >&3 && while read -r l; do [[ $l == *`+upstreamMarker+`* ]] && exit 0; done <&3; exit 1); do sleep 0.05; done; echo "$EPOCHREALTIME" > /tmp/reached) >/dev/null 2>&1 &
exec portserver -http 127.0.0.1:8000 -name from-the-start`,
		"--ready-cmd", `exec 3<>/dev/tcp/127.0.0.1/8000`)...)
	if code != 0 || !strings.Contains(out, "Start: ") {
		t.Fatalf("template build with a start command: %d %q %s", code, out, errOut)
	}
	tpl, err := c.GetTemplate(ctx, "served")
	if err != nil || tpl.Start == nil || !tpl.Start.Snapshot {
		t.Fatalf("the template: %+v, %v; want a start command with a snapshot", tpl, err)
	}
	get := `exec 3<>/dev/tcp/127.0.0.1/8000 && printf 'GET /x HTTP/1.0\r\n\r\n' >&3 && while read -r l; do [[ $l == *from-the-start* ]] && echo served; done <&3; echo "$GREETING"; cat /etc/ssl/certs/airlock-sandbox-ca.pem`
	var cas []string
	for _, greeting := range []string{"one", "two"} {
		asked := time.Now()
		sb := create(t, e, airlock.CreateSandboxRequest{Template: "served", Env: map[string]string{"GREETING": greeting}})
		res := sh(t, e, sb.ID, get)
		if !strings.HasPrefix(res.Stdout, "served\n"+greeting+"\n-----BEGIN CERTIFICATE-----") {
			t.Errorf("a sandbox of the template: %q (stderr %q); want the server answering, GREETING=%s, its CA", res.Stdout, res.Stderr, greeting)
		}
		cas = append(cas, res.Stdout)
		ps, err := c.ListProcesses(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, p := range ps.Processes {
			if p.Running && strings.Contains(strings.Join(p.Cmd, " "), "portserver") {
				found = true
				if !p.StartedAt.Before(asked) {
					t.Errorf("the start command started at %s, after the sandbox was asked for (%s): booted, not restored", p.StartedAt, asked)
				}
			}
		}
		if !found {
			t.Errorf("the sandbox's processes %+v lack the running start command", ps.Processes)
		}
	}
	if len(cas) == 2 && cas[0][len("served\none\n"):] == cas[1][len("served\ntwo\n"):] {
		t.Error("two sandboxes of the start snapshot share an interception CA")
	}
	// The warm pool has one ready by now (or soon): the next create takes it.
	metrics := func() map[string]float64 { return scrapeMetrics(t, e.URL, "airlock_") }
	for deadline := time.Now().Add(time.Minute); metrics()["airlock_warm_sandboxes"] < 1; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no warm sandbox after a minute: %v", metrics())
		}
	}
	warmBefore := metrics()[`airlock_start_creates_total{how="warm"}`]
	asked := time.Now()
	sb := create(t, e, airlock.CreateSandboxRequest{Template: "served", Env: map[string]string{"GREETING": "warm"},
		Network: &airlock.NetworkPolicy{Rules: []airlock.NetworkRule{{Action: "allow", Host: "api.example.test", Ports: []airlock.PortRange{"80"}}}}})
	if got := metrics()[`airlock_start_creates_total{how="warm"}`]; got != warmBefore+1 {
		t.Errorf("warm creates %v then %v; want the create served warm", warmBefore, got)
	}
	res := sh(t, e, sb.ID, get+`; cat /tmp/started; for ((i = 0; i < 100; i++)); do [ -e /tmp/reached ] && break; sleep 0.05; done; cat /tmp/reached`)
	const end = "-----END CERTIFICATE-----\n"
	head, times, _ := strings.Cut(res.Stdout, end)
	ca, ok := strings.CutPrefix(head, "served\nwarm\n")
	if !ok || !strings.HasPrefix(ca, "-----BEGIN CERTIFICATE-----") || strings.Contains(cas[0]+cas[1], ca) {
		t.Fatalf("a warm sandbox: %q (stderr %q); want the server answering, GREETING=warm, a CA of its own", res.Stdout, res.Stderr)
	}
	f := strings.Fields(times)
	if len(f) != 2 {
		t.Fatalf("a warm sandbox's start and first reach of the upstream: %q; want both (the create's policy lets it through)", times)
	}
	at := func(s string) time.Time {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("a time in the sandbox %q: %v", s, err)
		}
		return time.Unix(0, int64(f*1e9))
	}
	if started, reached := at(f[0]), at(f[1]); !started.Before(asked) || reached.Before(asked) {
		t.Errorf("warm sandbox: the command started at %s, reached the upstream at %s, the create asked at %s; "+
			"want started before (restored ahead) and reached after (nothing got out before a create took it)", started, reached, asked)
	}
	se, err := c.CreateSession(ctx, airlock.CreateSessionRequest{Template: "served"})
	if err != nil {
		t.Fatal(err)
	}
	if got := sh(t, e, se.ID, get).Stdout; !strings.HasPrefix(got, "served\n") {
		t.Errorf("a session of the template: %q; want the server answering", got)
	}
	// Positive control: the base template has no such server.
	if got := sh(t, e, create(t, e, airlock.CreateSandboxRequest{Template: "startbase"}).ID, get).Stdout; strings.Contains(got, "served") {
		t.Errorf("a sandbox of the base: %q; want no server", got)
	}
	code, out, errOut = runCLI(append(op, "template", "build", "broken", dir, "--start-cmd", "exit 7", "--ready-cmd", "false")...)
	if code == 0 || !strings.Contains(out+errOut, "exited (exit code 7) before the sandbox was ready") {
		t.Errorf("a build whose start command exits: %d %q %s; want it refused, saying so", code, out, errOut)
	}
	// A stop leaves nothing of the warm pool behind (nor of anything else).
	if metrics()["airlock_warm_sandboxes"] < 1 {
		t.Logf("no warm sandbox ready at the stop: %v", metrics())
	}
	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}
	after, err := testenv.TakeFootprint(e.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	// The images' roots stay mounted, for the next start.
	if after.Mounts = slices.DeleteFunc(after.Mounts, func(m string) bool { return strings.Contains(m, "/templates/oci/") }); len(after.Mounts) == 0 {
		after.Mounts = nil
	}
	if d := before.Diff(after); d != "" {
		t.Errorf("after the stop: %s", d)
	}
}
