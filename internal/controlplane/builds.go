package controlplane

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/airlockrun/airlock/internal/template/buildctx"
	"io"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/gateway/policy"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/template/dockerfile"
	"github.com/airlockrun/airlock/internal/template/oci"
)

// A template build runs a Dockerfile (the subset internal/template/dockerfile parses) into an image:
// each RUN in a sandbox of the image so far (never on the host) with the build's egress policy, what it
// wrote committed as a layer by the node; COPY and ADD from the build's context as a layer made here and
// copied into the image by the node; ENV, ARG, WORKDIR, USER, EXPOSE, LABEL, CMD and ENTRYPOINT into the
// image's config. Every step that makes a layer is cached by (parent image, instruction, its inputs):
// a document template-builds/<key> holding the image it made, used while the node still holds it.

// BuildRequest is what a build takes besides the template's name.
type BuildRequest struct {
	// Context is a tar of the build context; Dockerfile names the Dockerfile in it ("" : "Dockerfile").
	Context    io.Reader
	Dockerfile string
	// Args are the build arguments (ARG), by name.
	Args map[string]string
	// Allow lists the hosts RUN steps may reach (any port); nothing else is reachable.
	Allow []string
	// NoCache runs every step anew.
	NoCache bool
	// MemoryMB and DiskMB size the sandboxes RUN steps run in (0: the defaults).
	MemoryMB, DiskMB int
	// StartCmd and ReadyCmd are the template's start command and ready check (shell command lines; ""
	// : the image's labels run.airlock.start-cmd and run.airlock.ready-cmd, if any). See
	// templatestart.go.
	StartCmd, ReadyCmd string
	// Progress, if set, is told each step and a RUN's output as it comes.
	Progress func(BuildEvent)
}

// BuildEvent is one line of a build's progress.
type BuildEvent struct {
	// Step counts from 1 to Steps; Instruction is the step's Dockerfile line.
	Step, Steps int
	Instruction string
	// Output is a piece of a RUN step's output (stdout and stderr, as they come).
	Output string
	// Cached says the step's image came from the cache; Image is the image after the step (set when
	// the step is done and it made one).
	Cached bool
	Image  string
}

// Bounds on a build.
const (
	maxDockerfile  = 1 << 20
	maxBuildAllow  = 64
	maxBuildArgs   = 256
	buildStepLimit = 2 * time.Hour
)

// buildDocPrefix is the prefix of the build cache's documents.
const buildDocPrefix = "template-builds/"

// buildCacheEntry is a build cache document.
type buildCacheEntry struct {
	Image string `json:"image"`
}

// hostRE is what an --allow host may be: a name, possibly with a leading "*." wildcard.
var hostRE = regexp.MustCompile(`^(\*\.)?[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}))*$`)

// buildState is the image as a build has made it so far.
type buildState struct {
	name   string
	parent string // digest of the last image with layers, or oci.Scratch
	cfg    oci.Config
	args   map[string]string // declared ARGs and their values
	ports  []string
}

// BuildTemplate builds the Dockerfile of req.Context and points name at the image, as an import does.
// The build runs as tenantID (its RUN sandboxes are the tenant's, counted in its quotas).
func (s *builder) BuildTemplate(ctx context.Context, tenantID, name string, req BuildRequest) (Template, error) {
	if err := checkNewTemplateName(name); err != nil {
		return Template{}, err
	}
	if len(req.Allow) > maxBuildAllow || len(req.Args) > maxBuildArgs {
		return Template{}, invalid("at most %d allowed hosts and %d build arguments", maxBuildAllow, maxBuildArgs)
	}
	for _, h := range req.Allow {
		if !hostRE.MatchString(h) {
			return Template{}, invalid("allow %q: want a host name (or *.domain)", h)
		}
	}
	for k := range req.Args {
		if !envNamePattern.MatchString(k) {
			return Template{}, invalid("build argument %q: want a name of letters, digits and _", k)
		}
	}
	if err := s.placer.canMakeImages(); err != nil {
		return Template{}, err
	}
	if req.Context == nil {
		return Template{}, invalid("the build context is required")
	}
	bc, err := buildctx.Spool(req.Context)
	if err != nil {
		return Template{}, err
	}
	defer bc.Close()
	dfName := req.Dockerfile
	if dfName == "" {
		dfName = "Dockerfile"
	}
	dfName, err = buildctx.Name(dfName)
	if err != nil || dfName == "" {
		return Template{}, invalid("dockerfile %q: want a path in the build context", req.Dockerfile)
	}
	df, err := bc.ReadFile(dfName, maxDockerfile)
	if err != nil {
		return Template{}, err
	}
	steps, err := dockerfile.Parse(bytes.NewReader(df))
	if err != nil {
		return Template{}, fmt.Errorf("%s: %w", dfName, err)
	}
	progress := req.Progress
	if progress == nil {
		progress = func(BuildEvent) {}
	}
	st := &buildState{name: name, args: map[string]string{}}
	used := map[string]bool{}
	lookup := func(k string) (string, bool) {
		if v, ok := envValue(st.cfg.Env, k); ok {
			return v, true
		}
		v, ok := st.args[k]
		if ok {
			used[k] = true
		}
		return v, ok
	}
	expand := func(in dockerfile.Instruction, v string) (string, error) {
		out, err := dockerfile.Expand(v, lookup)
		if err != nil {
			return "", fmt.Errorf("line %d: %w", in.Line, err)
		}
		return out, nil
	}
	from := false
	for i, in := range steps {
		ev := BuildEvent{Step: i + 1, Steps: len(steps), Instruction: in.Original}
		progress(ev)
		if err := ctx.Err(); err != nil {
			return Template{}, err
		}
		if !from && in.Cmd != "ARG" && in.Cmd != "FROM" {
			return Template{}, invalid("line %d: the first instruction must be FROM", in.Line)
		}
		var img string
		cached := false
		switch in.Cmd {
		case "ARG":
			k := in.Args[0]
			v, given := req.Args[k]
			if !given && len(in.Args) > 1 {
				if v, err = expand(in, in.Args[1]); err != nil {
					return Template{}, err
				}
			}
			if given || len(in.Args) > 1 {
				st.args[k] = v
			} else if _, ok := st.args[k]; !ok {
				st.args[k] = ""
			}
			if given {
				used[k] = true
			}
		case "FROM":
			ref, err := expand(in, in.Args[0])
			if err != nil {
				return Template{}, err
			}
			if err := s.from(ctx, st, ref); err != nil {
				return Template{}, fmt.Errorf("line %d: FROM %s: %w", in.Line, ref, err)
			}
			// ARGs before FROM serve FROM only (Docker's rule).
			st.args = map[string]string{}
			from = true
		case "ENV":
			for j := 0; j+1 < len(in.Args); j += 2 {
				v, err := expand(in, in.Args[j+1])
				if err != nil {
					return Template{}, err
				}
				st.cfg.Env = setEnv(st.cfg.Env, in.Args[j], v)
			}
		case "LABEL":
			for j := 0; j+1 < len(in.Args); j += 2 {
				k, err := expand(in, in.Args[j])
				if err != nil {
					return Template{}, err
				}
				v, err := expand(in, in.Args[j+1])
				if err != nil {
					return Template{}, err
				}
				labels := make(map[string]string, len(st.cfg.Labels)+1)
				for lk, lv := range st.cfg.Labels {
					labels[lk] = lv
				}
				labels[k] = v
				st.cfg.Labels = labels
			}
		case "USER":
			u, err := expand(in, in.Args[0])
			if err != nil {
				return Template{}, err
			}
			st.cfg.User = u
		case "EXPOSE":
			for _, a := range in.Args {
				p, err := expand(in, a)
				if err != nil {
					return Template{}, err
				}
				st.ports = append(st.ports, p)
			}
		case "CMD":
			st.cfg.Cmd = execForm(in)
		case "ENTRYPOINT":
			st.cfg.Entrypoint = execForm(in)
			st.cfg.Cmd = nil // Docker's rule: a new ENTRYPOINT resets CMD
		case "WORKDIR":
			dir, err := expand(in, in.Args[0])
			if err != nil {
				return Template{}, err
			}
			if !path.IsAbs(dir) {
				dir = path.Join(workdirOf(st.cfg), dir)
			}
			st.cfg.WorkingDir = path.Clean(dir)
			if img, cached, err = s.layerStep(ctx, st, in, req, "WORKDIR "+st.cfg.WorkingDir, func() (oci.Step, error) {
				var b bytes.Buffer
				err := buildctx.WriteDirs(&b, st.cfg.WorkingDir)
				return oci.Step{Layer: &b, Into: true}, err
			}); err != nil {
				return Template{}, err
			}
		case "COPY", "ADD":
			args := make([]string, len(in.Args))
			for j, a := range in.Args {
				if args[j], err = expand(in, a); err != nil {
					return Template{}, err
				}
			}
			flags := map[string]string{}
			for k, v := range in.Flags {
				if flags[k], err = expand(in, v); err != nil {
					return Template{}, err
				}
			}
			if img, cached, err = s.copyStep(ctx, st, in, req, bc, args, flags); err != nil {
				return Template{}, err
			}
		case "RUN":
			if img, cached, err = s.runStep(ctx, tenantID, st, in, req, progress, ev); err != nil {
				return Template{}, err
			}
		default:
			return Template{}, invalid("line %d: %s is not supported", in.Line, in.Cmd)
		}
		if img != "" {
			st.parent = img
			ev.Image, ev.Cached = img, cached
			progress(ev)
		}
	}
	for k := range req.Args {
		if !used[k] {
			progress(BuildEvent{Steps: len(steps), Output: fmt.Sprintf("[warning] build argument %s was not used\n", k)})
		}
	}
	if st.parent == oci.Scratch {
		return Template{}, invalid("%s makes an empty image: add a COPY or FROM an image", dfName)
	}
	// The final config (ENV, USER, CMD… after the last layer) goes on an image of its own.
	img, err := s.placer.deriveImage(ctx, st.parent, oci.Step{Config: st.cfg, CreatedBy: "airlock template build " + name})
	if err != nil {
		return Template{}, err
	}
	if m, err := s.placer.maker(); err == nil {
		if err := s.placer.shareImage(ctx, m, img.Digest); err != nil {
			return Template{}, err
		}
	}
	start := &TemplateStart{Cmd: shellCommand(req.StartCmd), ReadyCmd: shellCommand(req.ReadyCmd)}
	if start.Cmd == nil {
		start.Cmd = shellCommand(img.Config.Labels[StartCmdLabel])
	}
	if start.ReadyCmd == nil {
		start.ReadyCmd = shellCommand(img.Config.Labels[ReadyCmdLabel])
	}
	if start.Cmd == nil {
		if start.ReadyCmd != nil {
			return Template{}, invalid("a ready check needs a start command (--start-cmd or the label %s)", StartCmdLabel)
		}
		return s.placer.recordTemplate(ctx, name, img)
	}
	ready := "after a second"
	if start.ReadyCmd != nil {
		ready = "when " + start.ReadyCmd[2] + " passes"
	}
	progress(BuildEvent{Steps: len(steps), Output: fmt.Sprintf("Start: %s, ready %s; saving a start snapshot\n", start.Cmd[2], ready)})
	if err := s.startSnapshot(ctx, tenantID, name, img, start, req); err != nil {
		return Template{}, err
	}
	return s.placer.recordTemplateStart(ctx, name, img, start, "")
}

// startSnapshot boots image img of template name with start's command, waits until it is ready and
// saves the start snapshot, setting start's Key and Runtime. A runtime that cannot checkpoint leaves
// them empty: each sandbox then starts the command itself.
func (s *builder) startSnapshot(ctx context.Context, tenantID, name string, img oci.Image, start *TemplateStart, req BuildRequest) error {
	sb, remove, err := s.buildSandbox(ctx, tenantID, name, name+"@"+img.Digest, req, maxStartTimeout,
		s.placer.nodeStart(start, img.Config.WorkingDir, "", ""))
	if err != nil {
		return fmt.Errorf("start command: %w", err)
	}
	defer remove()
	rt := sb.Metadata[RuntimeMetadataKey]
	key := startKey(img.Digest, *start, rt)
	if err := s.placer.saveStart(ctx, sb, key); err != nil {
		if errors.Is(err, errdefs.ErrFailedPrecondition) {
			s.log.Warn("no start snapshot: each sandbox will start the command itself", "template", name, "err", err)
			return nil
		}
		return fmt.Errorf("start snapshot: %w", err)
	}
	start.Key, start.Runtime = key, rt
	return nil
}

// from starts the build from ref: a template (its image now) or scratch.
func (s *builder) from(ctx context.Context, st *buildState, ref string) error {
	if ref == oci.Scratch {
		st.parent = oci.Scratch
		return nil
	}
	digest, err := s.placer.imageOf(ctx, ref, "cannot be built from: build FROM an imported, pulled or built template, or scratch")
	if err != nil {
		return err
	}
	img, err := s.placer.image(digest)
	if err != nil {
		return err
	}
	st.parent, st.cfg = digest, img.Config
	return nil
}

// layerStep makes (or takes from the cache) the image of a step that adds a layer made by make, keyed
// by key (the step's instruction and inputs) over the parent.
func (s *builder) layerStep(ctx context.Context, st *buildState, in dockerfile.Instruction, req BuildRequest, key string, make func() (oci.Step, error)) (string, bool, error) {
	ck := s.cacheKey(st, key)
	if !req.NoCache {
		if img, ok := s.cached(ctx, ck); ok {
			return img, true, nil
		}
	}
	step, err := make()
	if err != nil {
		return "", false, fmt.Errorf("line %d: %s: %w", in.Line, in.Cmd, err)
	}
	step.Config, step.CreatedBy = st.cfg, in.Original
	img, err := s.placer.deriveImage(ctx, st.parent, step)
	if err != nil {
		return "", false, fmt.Errorf("line %d: %s: %w", in.Line, in.Cmd, err)
	}
	s.remember(ctx, ck, img.Digest)
	return img.Digest, false, nil
}

// copyStep is COPY or ADD (without URLs; archives are copied, not unpacked): args are the sources and
// the destination, flags its --chown and --chmod, expanded.
func (s *builder) copyStep(ctx context.Context, st *buildState, in dockerfile.Instruction, req BuildRequest, bc *buildctx.Context, args []string, flags map[string]string) (string, bool, error) {
	srcs, dest := args[:len(args)-1], args[len(args)-1]
	destIsDir := strings.HasSuffix(dest, "/")
	if !path.IsAbs(dest) {
		dest = path.Join(workdirOf(st.cfg), dest)
	}
	dest = path.Clean(dest)
	uid, gid, err := buildctx.ParseChown(flags["chown"])
	if err != nil {
		return "", false, fmt.Errorf("line %d: %w", in.Line, err)
	}
	chmod := int64(-1)
	if c := flags["chmod"]; c != "" {
		if chmod, err = strconv.ParseInt(c, 8, 32); err != nil {
			return "", false, invalid("line %d: --chmod=%s: want an octal mode", in.Line, c)
		}
	}
	p, err := bc.Plan(srcs, dest, destIsDir)
	if err != nil {
		return "", false, fmt.Errorf("line %d: %w", in.Line, err)
	}
	key := fmt.Sprintf("COPY %s uid=%d gid=%d chmod=%d", bc.Digest(p), uid, gid, chmod)
	return s.layerStep(ctx, st, in, req, key, func() (oci.Step, error) {
		pr, pw := io.Pipe()
		go func() { // owner: the layer's reader (Derive), which reads it to its end or closes it
			pw.CloseWithError(bc.WriteLayer(pw, p, uid, gid, chmod))
		}()
		return oci.Step{Layer: pr, Into: true}, nil
	})
}

// runStep runs a RUN instruction in a sandbox of the image so far and commits what it wrote.
func (s *builder) runStep(ctx context.Context, tenantID string, st *buildState, in dockerfile.Instruction, req BuildRequest, progress func(BuildEvent), ev BuildEvent) (string, bool, error) {
	if st.parent == oci.Scratch {
		return "", false, invalid("line %d: RUN needs an image to run in: the build has no layer yet (COPY one, or FROM an image)", in.Line)
	}
	argv := in.Args
	if !in.JSON {
		argv = []string{"/bin/sh", "-c", in.Args[0]}
	}
	env := append([]string(nil), st.cfg.Env...)
	argNames := make([]string, 0, len(st.args))
	for k := range st.args {
		argNames = append(argNames, k)
	}
	sort.Strings(argNames)
	for _, k := range argNames {
		if _, ok := envValue(env, k); !ok {
			env = append(env, k+"="+st.args[k])
		}
	}
	user, _, _ := strings.Cut(st.cfg.User, ":")
	if user == "" {
		user = "root"
	}
	cwd := workdirOf(st.cfg)
	allow := append([]string(nil), req.Allow...)
	sort.Strings(allow)
	key, err := json.Marshal(struct {
		Argv  []string
		Env   []string
		User  string
		Cwd   string
		Allow []string
	}{argv, env, user, cwd, allow})
	if err != nil {
		return "", false, err
	}
	ck := s.cacheKey(st, "RUN "+string(key))
	if !req.NoCache {
		if img, ok := s.cached(ctx, ck); ok {
			return img, true, nil
		}
	}
	sb, remove, err := s.buildSandbox(ctx, tenantID, st.name, st.name+"@"+st.parent, req, buildStepLimit, nil)
	if err != nil {
		return "", false, fmt.Errorf("line %d: RUN: start its sandbox: %w", in.Line, err)
	}
	defer remove()
	out := progressWriter(func(b []byte) {
		e := ev
		e.Output = string(b)
		progress(e)
	})
	runCtx, cancel := context.WithTimeout(ctx, buildStepLimit)
	defer cancel()
	p, err := s.io.StartProcess(runCtx, tenantID, sb.ID, Command{Argv: argv, Env: env, Cwd: cwd, User: user}, nil,
		StreamOptions{Stdout: out, Stderr: out})
	if err != nil {
		return "", false, fmt.Errorf("line %d: RUN: %w", in.Line, err)
	}
	_ = p.CloseStdin()
	status, err := p.Wait(runCtx)
	if err != nil {
		return "", false, fmt.Errorf("line %d: RUN: %w", in.Line, err)
	}
	if status.ExitCode != 0 {
		return "", false, fmt.Errorf("line %d: RUN %s: exit code %d%s: %w", in.Line, clipText(in.Args[len(in.Args)-1], 200), status.ExitCode,
			signalNote(status), errdefs.ErrFailedPrecondition)
	}
	img, err := s.placer.commitSandbox(ctx, sb, oci.Step{Config: st.cfg, CreatedBy: in.Original})
	if err != nil {
		return "", false, fmt.Errorf("line %d: RUN: commit: %w", in.Line, err)
	}
	s.remember(ctx, ck, img.Digest)
	return img.Digest, false, nil
}

// buildSandbox creates a sandbox of image ref for a step of template name's build: the tenant's, sized
// by req, reaching only req.Allow's hosts, living for limit and a margin, with start if set. remove
// deletes it.
func (s *builder) buildSandbox(ctx context.Context, tenantID, name, ref string, req BuildRequest, limit time.Duration, start *nodecontract.Start) (store.Sandbox, func(), error) {
	pol := &policy.Policy{}
	for _, h := range req.Allow {
		pol.Rules = append(pol.Rules, policy.Rule{Name: "build-allow", Action: policy.ActionAllow, Host: h})
	}
	sb, err := s.sandboxes.CreateSandbox(ctx, tenantID, CreateRequest{Template: ref, Network: pol, MemoryMB: req.MemoryMB,
		DiskMB: req.DiskMB, TimeoutSeconds: int((limit + 10*time.Minute) / time.Second),
		Metadata: map[string]string{"template-build": name}, start: start})
	if err != nil {
		return store.Sandbox{}, nil, err
	}
	return sb, func() {
		if err := s.sandboxes.DeleteSandbox(context.WithoutCancel(ctx), tenantID, sb.ID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			s.log.Warn("remove a build's sandbox", "sandbox", sb.ID, "err", err)
		}
	}, nil
}

// signalNote says which signal ended a process, if one did.
func signalNote(st ExitStatus) string {
	if st.Signal != "" {
		return " (" + st.Signal + ")"
	}
	return ""
}

// clipText returns s cut to n bytes, marked.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// progressWriter passes what is written to fn (a copy: the caller's buffer is not kept).
type progressWriter func([]byte)

func (w progressWriter) Write(p []byte) (int, error) {
	w(append([]byte(nil), p...))
	return len(p), nil
}

// cacheKey is the key of a step: the parent image, the config so far (it is part of the step's image)
// and the step's instruction and inputs.
func (s *builder) cacheKey(st *buildState, step string) string {
	cfg, _ := json.Marshal(st.cfg)
	sum := sha256.Sum256([]byte("airlock-build-v1\x00" + st.parent + "\x00" + string(cfg) + "\x00" + step))
	return hex.EncodeToString(sum[:])
}

// cached returns the image the cache holds for key, if the node still has it.
func (s *builder) cached(ctx context.Context, key string) (string, bool) {
	d, err := s.store.GetDoc(ctx, buildDocPrefix+key)
	if err != nil {
		return "", false
	}
	var e buildCacheEntry
	if json.Unmarshal(d.Value, &e) != nil || oci.CheckDigest(e.Image) != nil {
		return "", false
	}
	if _, err := s.placer.image(e.Image); err != nil {
		return "", false
	}
	if s.now().Sub(d.UpdatedAt) > 24*time.Hour { // used: the image GC keeps it buildCacheTTL from now
		if _, err := s.store.PutDoc(ctx, store.Doc{Key: d.Key, Value: d.Value, Version: d.Version}); err != nil {
			s.log.Debug("build cache", "key", key, "err", err)
		}
	}
	return e.Image, true
}

// remember records the image a step made under its key (the last build wins).
func (s *builder) remember(ctx context.Context, key, image string) {
	b, _ := json.Marshal(buildCacheEntry{Image: image})
	k := buildDocPrefix + key
	version := int64(0)
	if cur, err := s.store.GetDoc(ctx, k); err == nil {
		version = cur.Version
	}
	if _, err := s.store.PutDoc(ctx, store.Doc{Key: k, Value: b, Version: version}); err != nil {
		s.log.Debug("build cache", "key", key, "err", err)
	}
}

// execForm returns a CMD's or ENTRYPOINT's argv: its JSON array, or the shell form run by /bin/sh -c.
func execForm(in dockerfile.Instruction) []string {
	if in.JSON {
		return append([]string{}, in.Args...)
	}
	return []string{"/bin/sh", "-c", in.Args[0]}
}

// workdirOf is where a step runs: the config's WorkingDir, or /.
func workdirOf(c oci.Config) string {
	if c.WorkingDir == "" {
		return "/"
	}
	return c.WorkingDir
}

// envValue returns the value of k in env (KEY=VALUE entries).
func envValue(env []string, k string) (string, bool) {
	for _, e := range env {
		if ek, v, ok := strings.Cut(e, "="); ok && ek == k {
			return v, true
		}
	}
	return "", false
}

// setEnv returns env with k set to v (replacing an entry for k in place).
func setEnv(env []string, k, v string) []string {
	out := append([]string(nil), env...)
	for i, e := range out {
		if ek, _, ok := strings.Cut(e, "="); ok && ek == k {
			out[i] = k + "=" + v
			return out
		}
	}
	return append(out, k+"="+v)
}

// MaxBuildContext bounds a build's context (buildctx.Max).
const MaxBuildContext = buildctx.Max
