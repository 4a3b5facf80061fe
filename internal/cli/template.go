package cli

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlockrun/airlock/api/wire"
	"github.com/airlockrun/airlock/internal/fsutil"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

func newTemplateCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "template",
		Short: "Templates sandboxes boot from: the built-in one and OCI images",
		Long: `A template is the read-only root filesystem a sandbox boots from: the built-in "default" (the host's /usr
under a generated /etc), or an OCI image the operator imported:

    airlock template import python ./python.tar      (a docker save tarball, an OCI archive or layout)
    airlock sandbox create --template python

A sandbox or session records the image's digest (python@sha256:…), so importing a new version under the
same name, or removing the name, never changes what it, its snapshots and its forks boot.`,
	}
	cmd.AddCommand(newTemplateLsCmd(g), newTemplateGetCmd(g), newTemplateImportCmd(g), newTemplatePullCmd(g), newTemplateBuildCmd(g),
		newTemplateExportCmd(g), newTemplateRuntimesCmd(g), newTemplateRmCmd(g))
	return cmd
}

func newTemplateLsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List the templates",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			l, err := g.client().ListTemplates(cmd.Context())
			if done, err := g.jsonOrErr(l, err); done {
				return err
			}
			t := newTable(g.Out, "NAME", "DIGEST", "LAYERS", "UPDATED")
			now := time.Now()
			for _, tp := range l.Templates {
				digest, layers := tp.Digest, strconv.Itoa(tp.Layers)
				if tp.Builtin && tp.Digest == "" {
					digest, layers = "(built in: the host's /usr)", "-"
				}
				t.row(tp.Name, shortDigest(digest), layers, relTime(tp.UpdatedAt, now))
			}
			return t.flush()
		},
	}
}

func newTemplateGetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get NAME",
		Short: "Show a template",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			tp, err := g.client().GetTemplate(cmd.Context(), args[0])
			if done, err := g.jsonOrErr(tp, err); done {
				return err
			}
			printTemplate(g.Out, tp)
			return nil
		},
	}
}

func newTemplateImportCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "import NAME PATH",
		Short: "Import an OCI image as a template, or as a new version of one (operator tenant's admin key)",
		Long: `Import the OCI image at PATH: a docker save tarball, an OCI archive (a tar of an image layout) or an OCI
image layout directory (sent as a tar). Of a multi-platform image, linux/amd64 is taken. The server unpacks
its layers once, checks them against their digests and refuses a layer that would write outside its root.
NAME then points at the image: new sandboxes of NAME boot it; those made before keep theirs.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			name, src := args[0], args[1]
			fi, err := os.Stat(src)
			if err != nil {
				return err
			}
			var body io.Reader
			if fi.IsDir() {
				pr, pw := io.Pipe()
				go func() { pw.CloseWithError(writeTar(pw, src, "")) }() // owner: import; ends with the pipe
				defer pr.Close()
				body = pr
			} else {
				f, err := os.Open(src)
				if err != nil {
					return err
				}
				defer f.Close()
				body = f
			}
			tp, err := g.client().ImportTemplate(cmd.Context(), name, body)
			if err != nil {
				return err
			}
			return printNewVersion(g, tp)
		},
	}
}

func newTemplatePullCmd(g *globals) *cobra.Command {
	var pull wire.PullTemplateRequest
	pullCmd := &cobra.Command{
		Use:   "pull NAME IMAGE",
		Short: "Fetch an OCI image from a registry as a template (operator tenant's admin key)",
		Long: `Fetch IMAGE (registry/repository[:tag|@digest]) from its registry and point NAME at it, as import does.
Only trusted HTTPS is spoken unless --insecure, loopback and private addresses included. Credentials:
--username and --password-secret, the name of one of your secrets holding the password or token
(POST /v1/secrets; it is read for the pull only).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			pull.Image = args[1]
			tp, err := g.client().PullTemplate(cmd.Context(), args[0], pull)
			if err != nil {
				return err
			}
			return printNewVersion(g, tp)
		},
	}
	pullCmd.Flags().BoolVar(&pull.Insecure, "insecure", false, "allow plain HTTP, or TLS with a certificate the server does not trust")
	pullCmd.Flags().StringVar(&pull.Username, "username", "", "the registry user")
	pullCmd.Flags().StringVar(&pull.PasswordSecret, "password-secret", "", "the name of your secret holding the registry password or token")
	return pullCmd
}

func newTemplateRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a template's name; what recorded its image keeps it (operator tenant's admin key)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			rm, err := g.client().DeleteTemplate(cmd.Context(), args[0])
			if done, err := g.jsonOrErr(rm, err); done {
				return err
			}
			fmt.Fprintf(g.Out, "template %s removed\n", args[0])
			if u := usersText(rm.Users); u != "" {
				fmt.Fprintf(g.Out, "its image %s stays while these use it: %s\n", rm.Digest, u)
			} else {
				fmt.Fprintf(g.Out, "nothing uses its image %s any more: the nodes remove it after an hour unused\n", rm.Digest)
			}
			return nil
		},
	}
}

func newTemplateBuildCmd(g *globals) *cobra.Command {
	var (
		build     airlock.BuildTemplateOptions
		buildArgs []string
		dfPath    string
	)
	buildCmd := &cobra.Command{
		Use:   "build NAME [CONTEXT]",
		Short: "Build a template from a Dockerfile (operator tenant's admin key)",
		Long: `Build the Dockerfile (-f, default CONTEXT/Dockerfile) with the directory CONTEXT (default .) as its build
context, and point NAME at the image, as import does. Supported: FROM (a template, NAME@sha256:…, or
scratch), RUN, COPY, ADD (no URLs), ENV, ARG, WORKDIR, USER, EXPOSE, LABEL, CMD, ENTRYPOINT; anything else is
refused naming its line. Each RUN runs in a sandbox of the image so far, never on the host, and reaches only
the hosts --allow names. Every step is cached by its parent image, instruction and inputs: a rebuild of an
unchanged Dockerfile takes only the cache.

With --start-cmd (or the image's label run.airlock.start-cmd), every sandbox of the template has that
command running when it is handed over: the build boots the image once, waits until --ready-cmd passes and
keeps a start snapshot that sandboxes are restored from.

    airlock template build python-tools -f Dockerfile --allow deb.debian.org --build-arg VERSION=3 ./ctx
    airlock template build api . --start-cmd 'python3 -m http.server 8000' --ready-cmd 'curl -sf localhost:8000'`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			dir := "."
			if len(args) > 1 {
				dir = args[1]
			}
			opts := build
			opts.Args = map[string]string{}
			for _, a := range buildArgs {
				k, v, ok := strings.Cut(a, "=")
				if !ok {
					v, ok = os.LookupEnv(k) // Docker's rule: --build-arg NAME takes NAME from the environment
				}
				if !ok {
					continue
				}
				opts.Args[k] = v
			}
			body, name, err := buildContext(dir, dfPath)
			if err != nil {
				return err
			}
			defer body.Close()
			opts.Dockerfile = name
			if !g.json {
				opts.Progress = func(e wire.BuildEvent) { printBuildEvent(g.Out, e) }
			}
			tp, err := g.client().BuildTemplate(cmd.Context(), args[0], body, opts)
			if err != nil {
				return err
			}
			return printNewVersion(g, tp)
		},
	}
	buildCmd.Flags().StringVarP(&dfPath, "file", "f", "", "the Dockerfile (default CONTEXT/Dockerfile)")
	buildCmd.Flags().StringArrayVar(&build.Allow, "allow", nil, "a host RUN steps may reach (a name or *.domain; repeat)")
	buildCmd.Flags().StringArrayVar(&buildArgs, "build-arg", nil, "a build argument NAME=VALUE (NAME alone: from the environment; repeat)")
	buildCmd.Flags().BoolVar(&build.NoCache, "no-cache", false, "run every step anew")
	buildCmd.Flags().IntVar(&build.MemoryMB, "memory", 0, "memory of RUN steps' sandboxes, MiB (default: the server's)")
	buildCmd.Flags().IntVar(&build.DiskMB, "disk", 0, "disk of RUN steps' sandboxes, MiB (default: the server's)")
	buildCmd.Flags().StringVar(&build.StartCmd, "start-cmd", "", "a command every sandbox of the template has running (default: the label run.airlock.start-cmd)")
	buildCmd.Flags().StringVar(&build.ReadyCmd, "ready-cmd", "", "a check that passes (exits 0) once the start command is ready (default: the label run.airlock.ready-cmd)")
	return buildCmd
}

func newTemplateExportCmd(g *globals) *cobra.Command {
	var exportOut string
	export := &cobra.Command{
		Use:   "export NAME",
		Short: "Write a template's image as an OCI archive (operator tenant's admin key)",
		Long: `Write the image of NAME (or NAME@sha256:…) as an OCI archive (a tar of an OCI image layout) to -o FILE, or
to stdout: "airlock template import" on another server, skopeo or podman take it back as the same image.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			if exportOut == "" || exportOut == "-" {
				return g.client().ExportTemplate(cmd.Context(), args[0], g.Out)
			}
			tmp := exportOut + ".partial"
			f, err := os.Create(tmp)
			if err != nil {
				return err
			}
			defer os.Remove(tmp)
			if err := g.client().ExportTemplate(cmd.Context(), args[0], f); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			return os.Rename(tmp, exportOut)
		},
	}
	export.Flags().StringVarP(&exportOut, "output", "o", "", "the file to write (default: stdout)")
	return export
}

func newTemplateRuntimesCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "runtimes NAME [RUNTIME...]",
		Short: "Show or set the runtimes a template's sandboxes may run on",
		Long: `With only a name, print the runtimes the template's sandboxes may run on; with runtimes, set them, in
order of preference: the first is the default, and one alone forces it ("vm" is every VM runtime: vm:qemu,
vm:firecracker). "*" alone allows every runtime again. A tenant must also be allowed the runtime.`,
		Example: `  airlock template runtimes python vm
  airlock template runtimes python gvisor vm:qemu
  airlock template runtimes python '*'`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			var t wire.Template
			var err error
			if len(args) == 1 {
				var got *wire.Template
				if got, err = g.client().GetTemplate(cmd.Context(), args[0]); got != nil {
					t = *got
				}
			} else {
				names := args[1:]
				if len(names) == 1 && names[0] == "*" {
					names = []string{}
				}
				t, err = g.client().SetTemplateRuntimes(cmd.Context(), args[0], names)
			}
			if done, err := g.jsonOrErr(t, err); done {
				return err
			}
			rs := "every runtime"
			if len(t.Runtimes) > 0 {
				rs = strings.Join(t.Runtimes, ", ")
			}
			fmt.Fprintf(g.Out, "template %s's sandboxes may run on: %s\n", t.Name, rs)
			return nil
		},
	}
}

// buildContext returns the tar of the build context dir, streamed, with the Dockerfile at df ("":
// dir/Dockerfile) in it, and the Dockerfile's name in the tar. A Dockerfile outside dir is added to the
// archive under a name of its own.
func buildContext(dir, df string) (io.ReadCloser, string, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, "", err
	}
	if !fi.IsDir() {
		return nil, "", fmt.Errorf("build context %s is not a directory", dir)
	}
	name, extra := "Dockerfile", func(*tar.Writer) error { return nil }
	if df != "" {
		absDir, err1 := filepath.Abs(dir)
		absDF, err2 := filepath.Abs(df)
		if err := errors.Join(err1, err2); err != nil {
			return nil, "", err
		}
		if rel, err := filepath.Rel(absDir, absDF); err == nil && filepath.IsLocal(rel) {
			name = filepath.ToSlash(rel)
		} else {
			b, err := fsutil.ReadFileLimit(df, 1<<20)
			if err != nil {
				return nil, "", err
			}
			name = ".airlock-build/Dockerfile"
			extra = func(tw *tar.Writer) error {
				if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
					return err
				}
				_, err := tw.Write(b)
				return err
			}
		}
	}
	skip, err := readDockerignore(dir, name)
	if err != nil {
		return nil, "", err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTarAnd(pw, dir, "", skip, extra)) }() // owner: the caller, who reads or closes pr
	return pr, name, nil
}

// printBuildEvent shows one event of a build, docker build's way.
func printBuildEvent(w io.Writer, e wire.BuildEvent) {
	switch {
	case e.Output != "":
		fmt.Fprint(w, e.Output)
	case e.Image != "" && e.Cached:
		fmt.Fprintf(w, " ---> Using cache\n ---> %s\n", shortDigest(e.Image))
	case e.Image != "":
		fmt.Fprintf(w, " ---> %s\n", shortDigest(e.Image))
	case e.Step > 0:
		fmt.Fprintf(w, "Step %d/%d : %s\n", e.Step, e.Steps, e.Instruction)
	}
}

// usersText says what uses an image ("" if nothing): other names, then counts of sessions and
// sandboxes with the IDs the server listed.
func usersText(u wire.TemplateUsers) string {
	var parts []string
	if len(u.Names) > 0 {
		parts = append(parts, "template "+strings.Join(u.Names, ", "))
	}
	list := func(n int, one, many string, ids []string) {
		if n == 0 {
			return
		}
		p := fmt.Sprintf("%d %s", n, one)
		if n != 1 {
			p = fmt.Sprintf("%d %s", n, many)
		}
		p += " (" + strings.Join(ids, ", ")
		if n > len(ids) {
			p += ", …"
		}
		parts = append(parts, p+")")
	}
	list(u.SessionCount, "session", "sessions", u.Sessions)
	list(u.SandboxCount, "sandbox", "sandboxes", u.Sandboxes)
	return strings.Join(parts, "; ")
}

// printNewVersion says what a template imported or pulled now boots.
func printNewVersion(g *globals, tp *wire.Template) error {
	if g.json {
		return printJSON(g.Out, tp)
	}
	fmt.Fprintf(g.Out, "template %s now boots %s\n", tp.Name, tp.Ref)
	return nil
}

// shortDigest shortens "sha256:<64 hex>" to "sha256:<12 hex>".
func shortDigest(d string) string {
	if rest, ok := strings.CutPrefix(d, "sha256:"); ok && len(rest) > 12 {
		return "sha256:" + rest[:12]
	}
	return d
}

func printTemplate(w io.Writer, tp *wire.Template) {
	fmt.Fprintf(w, "name:        %s\n", tp.Name)
	fmt.Fprintf(w, "ref:         %s\n", tp.Ref)
	if tp.Builtin && tp.Digest == "" {
		fmt.Fprintf(w, "built in:    the host's /usr under a generated /etc (scripts/install.sh builds an image for it)\n")
		return
	}
	if tp.Builtin {
		fmt.Fprintf(w, "built in:    the platform's image, installed at start (airlock up --default-image)\n")
	}
	fmt.Fprintf(w, "layers:      %d\n", tp.Layers)
	if len(tp.Env) > 0 {
		fmt.Fprintf(w, "env:         %s\n", strings.Join(tp.Env, " "))
	}
	if tp.WorkingDir != "" {
		fmt.Fprintf(w, "working dir: %s\n", tp.WorkingDir)
	}
	if tp.User != "" {
		fmt.Fprintf(w, "user:        %s\n", tp.User)
	}
	if len(tp.Entrypoint)+len(tp.Cmd) > 0 {
		fmt.Fprintf(w, "command:     %s\n", shellJoin(append(append([]string{}, tp.Entrypoint...), tp.Cmd...)))
	}
	if st := tp.Start; st != nil {
		how := "started in each sandbox"
		if st.Snapshot {
			how = "restored running from a start snapshot"
		}
		fmt.Fprintf(w, "start:       %s (%s)\n", shellJoin(st.Cmd), how)
		if len(st.ReadyCmd) > 0 {
			fmt.Fprintf(w, "ready when:  %s\n", shellJoin(st.ReadyCmd))
		}
	}
	if len(tp.Labels) > 0 {
		keys := make([]string, 0, len(tp.Labels))
		for k := range tp.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			head := "labels:     "
			if i > 0 {
				head = "            "
			}
			fmt.Fprintf(w, "%s %s=%s\n", head, k, tp.Labels[k])
		}
	}
	if tp.UpdatedAt != nil {
		fmt.Fprintf(w, "updated:     %s\n", tp.UpdatedAt.Local().Format(time.DateTime))
	}
}
