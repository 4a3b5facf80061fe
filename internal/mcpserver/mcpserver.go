// Package mcpserver is Airlock's MCP server (`airlock mcp`): tools an agent needs to work in sandboxes
// and sessions — create, list and delete them, run commands, read and write files, pause, resume and
// fork, snapshot, travel the timeline and diff, reach a port — each a call of the Go SDK on Airlock's
// API with the credential the server was started with. An API key reaches what its tenant and scope
// allow; an access token reaches its one sandbox or session, and its scopes' work only: the API says
// no to anything else, and the tool reports that as its error.
package mcpserver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockrun/airlock/api/wire"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// Limits of the tools.
const (
	// DefaultCommandTimeout and MaxCommandTimeout bound run_command.
	DefaultCommandTimeout = 60 * time.Second
	MaxCommandTimeout     = 10 * time.Minute
	// DefaultOutputBytes and MaxOutputBytes cap what run_command returns of each of stdout and stderr.
	DefaultOutputBytes = 64 << 10
	MaxOutputBytes     = 1 << 20
	// MaxFileBytes caps what read_file returns and write_file takes; read_file reads no more than one
	// byte past it.
	MaxFileBytes = 4 << 20
	// MaxListEntries caps the entries list_files returns.
	MaxListEntries = 10000
)

// New returns the MCP server whose tools call Airlock through c; version is the server's.
func New(c *airlock.Client, version string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "airlock", Title: "Airlock sandboxes", Version: version}, &mcp.ServerOptions{
		Instructions: "Airlock runs code in isolated sandboxes (sb_…, destroyed at their timeout) and sessions (se_…, which " +
			"pause with their memory and resume later, fork, and keep a timeline of snapshots). Create one, then run " +
			"commands and work with files in it by its ID; delete it when done.",
	})
	t := tools{c: c}
	add(s, "create_sandbox", "Create a sandbox (destroyed at its timeout, default 5 minutes) and return it; use its id with the other tools.", t.createSandbox)
	add(s, "create_session", "Create a session: a sandbox that can be paused (memory kept), resumed, forked and rewound. Returns it.", t.createSession)
	add(s, "list", "List the sandboxes or the sessions (kind) you can reach.", t.list)
	add(s, "delete", "Delete a sandbox or a session (and its snapshots) by id.", t.delete)
	add(s, "run_command", "Run a shell command in a sandbox or session and return its exit code, stdout and stderr (capped).", t.runCommand)
	add(s, "read_file", "Read a file of a sandbox or session (text; binary as base64).", t.readFile)
	add(s, "write_file", "Write a file of a sandbox or session (its parents are made).", t.writeFile)
	add(s, "list_files", "List a directory of a sandbox or session.", t.listFiles)
	add(s, "pause_session", "Pause a session: its memory, processes and files go into a snapshot and its sandbox is freed.", t.pause)
	add(s, "resume_session", "Resume a paused session: its processes continue where they were.", t.resume)
	add(s, "fork_session", "Fork a session into count new sessions, each from a snapshot taken now.", t.fork)
	add(s, "snapshot_session", "Take a snapshot of a running session (it keeps running), optionally named.", t.snapshot)
	add(s, "timeline", "List a session's snapshots, oldest first, and which one it runs from.", t.timeline)
	add(s, "restore_session", "Move a session back (or forward) to one of its snapshots, by id or by time (RFC 3339).", t.restore)
	add(s, "diff", "What changed in a session's files between two of its snapshots (or one file's unified diff).", t.diff)
	add(s, "port_url", "A URL that reaches a port of a sandbox or session from a browser, valid for ttl_seconds.", t.portURL)
	mcp.AddTool(s, &mcp.Tool{Name: "run_code", Description: "Run Python code in a stateful code context (variables and imports are kept " +
		"between runs) of a sandbox or session of the code-interpreter template; returns stdout, stderr, the last expression's value, " +
		"the error with its traceback, and charts (matplotlib) as images."}, t.runCode)
	return s
}

// add registers a tool; its errors are the tool's result (IsError, the message as text), as MCP wants,
// not the protocol's.
func add[In, Out any](s *mcp.Server, name, desc string, h func(context.Context, In) (Out, error)) {
	mcp.AddTool(s, &mcp.Tool{Name: name, Description: desc}, func(ctx context.Context, _ *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		out, err := h(ctx, in)
		return nil, out, err
	})
}

type tools struct{ c *airlock.Client }

// Resources asks for a sandbox's or session's size and contents.
type Resources struct {
	Template       string            `json:"template,omitempty" jsonschema:"the template to boot (default: default)"`
	MemoryMB       int               `json:"memory_mb,omitempty" jsonschema:"memory in MiB (default 512)"`
	CPUMillicores  int               `json:"cpu_millicores,omitempty" jsonschema:"CPU in thousandths of a core (default 1000)"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"environment variables of its processes"`
	Metadata       map[string]string `json:"metadata,omitempty" jsonschema:"labels to find it by"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty" jsonschema:"a sandbox's lifetime (default 300); a session's: each run's (default none)"`
	AllowHosts     []string          `json:"allow_hosts,omitempty" jsonschema:"host names (or *.domain) it may reach; none: no network"`
}

func (r Resources) network() *wire.NetworkPolicy {
	if len(r.AllowHosts) == 0 {
		return nil
	}
	p := &wire.NetworkPolicy{Default: "deny"}
	for _, h := range r.AllowHosts {
		p.Rules = append(p.Rules, wire.NetworkRule{Action: "allow", Host: h})
	}
	return p
}

// Thing is a sandbox or session as the tools show it.
type Thing struct {
	ID       string            `json:"id"`
	Kind     string            `json:"kind" jsonschema:"sandbox or session"`
	State    string            `json:"state"`
	Reason   string            `json:"reason,omitempty"`
	Template string            `json:"template"`
	EndsAt   *time.Time        `json:"ends_at,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

func sandboxThing(sb wire.Sandbox) Thing {
	return Thing{ID: sb.ID, Kind: "sandbox", State: sb.State, Reason: sb.Reason, Template: sb.Template, EndsAt: sb.EndsAt, Metadata: sb.Metadata}
}

func sessionThing(se wire.Session) Thing {
	return Thing{ID: se.ID, Kind: "session", State: se.State, Reason: se.Reason, Template: se.Template, EndsAt: se.EndsAt, Metadata: se.Metadata}
}

func (t tools) createSandbox(ctx context.Context, in Resources) (Thing, error) {
	sb, err := t.c.CreateSandbox(ctx, wire.CreateSandboxRequest{Template: in.Template, MemoryMB: in.MemoryMB, CPU: in.CPUMillicores,
		Env: in.Env, Metadata: in.Metadata, TimeoutSeconds: in.TimeoutSeconds, Network: in.network()})
	if err != nil {
		return Thing{}, err
	}
	return sandboxThing(*sb), nil
}

func (t tools) createSession(ctx context.Context, in Resources) (Thing, error) {
	se, err := t.c.CreateSession(ctx, wire.CreateSessionRequest{Template: in.Template, MemoryMB: in.MemoryMB, CPU: in.CPUMillicores,
		Env: in.Env, Metadata: in.Metadata, TimeoutSeconds: in.TimeoutSeconds, Network: in.network()})
	if err != nil {
		return Thing{}, err
	}
	if se.State == wire.SessionFailed {
		return Thing{}, fmt.Errorf("session %s failed to start: %s", se.ID, se.Reason)
	}
	return sessionThing(*se), nil
}

// ListIn asks for sandboxes or sessions.
type ListIn struct {
	Kind     string            `json:"kind,omitempty" jsonschema:"sandboxes (default) or sessions"`
	Metadata map[string]string `json:"metadata,omitempty" jsonschema:"only those with all these labels"`
}

// Things is a list of sandboxes or sessions.
type Things struct {
	Items []Thing `json:"items"`
}

func (t tools) list(ctx context.Context, in ListIn) (Things, error) {
	out := Things{Items: []Thing{}}
	opts := airlock.ListOptions{Metadata: in.Metadata, Limit: 100}
	switch in.Kind {
	case "", "sandboxes", "sandbox":
		l, err := t.c.ListSandboxes(ctx, opts)
		if err != nil {
			return out, err
		}
		for _, sb := range l.Sandboxes {
			out.Items = append(out.Items, sandboxThing(sb))
		}
	case "sessions", "session":
		l, err := t.c.ListSessions(ctx, opts)
		if err != nil {
			return out, err
		}
		for _, se := range l.Sessions {
			out.Items = append(out.Items, sessionThing(se))
		}
	default:
		return out, fmt.Errorf("kind must be sandboxes or sessions, not %q", in.Kind)
	}
	return out, nil
}

// IDIn names a sandbox or session.
type IDIn struct {
	ID string `json:"id" jsonschema:"the sandbox's (sb_…) or session's (se_…) id"`
}

// Done says what was done.
type Done struct {
	Done string `json:"done"`
}

func (t tools) delete(ctx context.Context, in IDIn) (Done, error) {
	var err error
	switch {
	case strings.HasPrefix(in.ID, "se_"):
		err = t.c.DeleteSession(ctx, in.ID)
	case strings.HasPrefix(in.ID, "sb_"):
		err = t.c.DeleteSandbox(ctx, in.ID)
	default:
		err = fmt.Errorf("id %q is neither a sandbox's (sb_…) nor a session's (se_…)", in.ID)
	}
	if err != nil {
		return Done{}, err
	}
	return Done{Done: "deleted " + in.ID}, nil
}

// CommandIn is a command to run.
type CommandIn struct {
	ID             string            `json:"id" jsonschema:"the sandbox or session to run it in"`
	Command        string            `json:"command" jsonschema:"a shell command line, run with bash -lc"`
	Cwd            string            `json:"cwd,omitempty" jsonschema:"the working directory (absolute; default the user's home)"`
	Env            map[string]string `json:"env,omitempty"`
	User           string            `json:"user,omitempty" jsonschema:"the user to run as (default the sandbox's user; root is allowed)"`
	Stdin          string            `json:"stdin,omitempty"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty" jsonschema:"kill it after this long (default 60, at most 600)"`
	MaxOutputBytes int               `json:"max_output_bytes,omitempty" jsonschema:"return at most this much of each of stdout and stderr, the end kept (default 65536, at most 1048576)"`
}

// CommandOut is how a command ended: the API's exec result, its output capped to the request's bound
// (the end kept).
type CommandOut = wire.ExecResult

func (t tools) runCommand(ctx context.Context, in CommandIn) (CommandOut, error) {
	if strings.TrimSpace(in.Command) == "" {
		return CommandOut{}, errors.New("command is empty")
	}
	timeout := DefaultCommandTimeout
	if in.TimeoutSeconds != 0 {
		timeout = time.Duration(in.TimeoutSeconds) * time.Second
	}
	if timeout <= 0 || timeout > MaxCommandTimeout {
		return CommandOut{}, fmt.Errorf("timeout_seconds must be between 1 and %d", int(MaxCommandTimeout/time.Second))
	}
	limit := DefaultOutputBytes
	if in.MaxOutputBytes != 0 {
		limit = in.MaxOutputBytes
	}
	if limit < 1 || limit > MaxOutputBytes {
		return CommandOut{}, fmt.Errorf("max_output_bytes must be between 1 and %d", MaxOutputBytes)
	}
	res, err := t.c.Exec(ctx, in.ID, wire.ExecRequest{Cmd: []string{"bash", "-lc", in.Command}, Cwd: in.Cwd, Env: in.Env,
		User: in.User, Stdin: in.Stdin, TimeoutSeconds: int(timeout / time.Second)})
	if err != nil {
		return CommandOut{}, err
	}
	out := *res
	var cut bool
	out.Stdout, cut = tail(res.Stdout, limit)
	out.StdoutTruncated = out.StdoutTruncated || cut
	out.Stderr, cut = tail(res.Stderr, limit)
	out.StderrTruncated = out.StderrTruncated || cut
	return out, nil
}

// tail is the last n bytes of s at most (from a rune's start), and whether anything was cut.
func tail(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	s = s[len(s)-n:]
	for len(s) > 0 && !utf8.RuneStart(s[0]) {
		s = s[1:]
	}
	return s, true
}

// PathIn names a file or directory of a sandbox or session.
type PathIn struct {
	ID   string `json:"id"`
	Path string `json:"path" jsonschema:"an absolute path"`
}

// FileOut is a file's contents.
type FileOut struct {
	Path     string `json:"path"`
	Size     int    `json:"size"`
	Encoding string `json:"encoding" jsonschema:"utf-8, or base64 for a file that is not text"`
	Content  string `json:"content"`
}

func (t tools) readFile(ctx context.Context, in PathIn) (FileOut, error) {
	// Bounded while reading, not by a Stat first: the sandbox can grow the file (or make it sparse and
	// huge) between the two.
	b, err := t.c.ReadFileLimit(ctx, in.ID, in.Path, MaxFileBytes)
	if errors.Is(err, airlock.ErrTooLarge) {
		return FileOut{}, fmt.Errorf("%s is larger than %d bytes; read_file returns at most %d (run_command with head or tail)", in.Path, MaxFileBytes, MaxFileBytes)
	}
	if err != nil {
		return FileOut{}, err
	}
	if utf8.Valid(b) {
		return FileOut{Path: in.Path, Size: len(b), Encoding: "utf-8", Content: string(b)}, nil
	}
	return FileOut{Path: in.Path, Size: len(b), Encoding: "base64", Content: base64.StdEncoding.EncodeToString(b)}, nil
}

// WriteIn is a file to write.
type WriteIn struct {
	ID       string `json:"id"`
	Path     string `json:"path" jsonschema:"an absolute path; missing parent directories are made"`
	Content  string `json:"content"`
	Encoding string `json:"encoding,omitempty" jsonschema:"utf-8 (default) or base64"`
}

// FileEntry describes a file.
type FileEntry struct {
	Name    string    `json:"name"`
	Path    string    `json:"path"`
	Type    string    `json:"type" jsonschema:"file, dir, symlink or other"`
	Size    int64     `json:"size"`
	Mode    string    `json:"mode"`
	ModTime time.Time `json:"mod_time"`
}

func entry(fi wire.FileInfo) FileEntry {
	return FileEntry{Name: fi.Name, Path: fi.Path, Type: fi.Type, Size: fi.Size, Mode: fi.Mode, ModTime: fi.ModTime}
}

func (t tools) writeFile(ctx context.Context, in WriteIn) (FileEntry, error) {
	data := []byte(in.Content)
	switch in.Encoding {
	case "", "utf-8", "utf8", "text":
	case "base64":
		var err error
		if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return FileEntry{}, fmt.Errorf("content is not base64: %v", err)
		}
	default:
		return FileEntry{}, fmt.Errorf("encoding must be utf-8 or base64, not %q", in.Encoding)
	}
	if len(data) > MaxFileBytes {
		return FileEntry{}, fmt.Errorf("content is %d bytes; write_file takes at most %d", len(data), MaxFileBytes)
	}
	if dir := parentDir(in.Path); dir != "" {
		if _, err := t.c.Mkdir(ctx, in.ID, dir); err != nil {
			return FileEntry{}, err
		}
	}
	fi, err := t.c.WriteFile(ctx, in.ID, in.Path, strings.NewReader(string(data)), 0o644)
	if err != nil {
		return FileEntry{}, err
	}
	return entry(*fi), nil
}

// parentDir is p's directory if it is not the root, else "".
func parentDir(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return ""
	}
	return p[:i]
}

// Entries lists a directory.
type Entries struct {
	Entries   []FileEntry `json:"entries"`
	Truncated bool        `json:"truncated,omitempty" jsonschema:"the directory has more entries than the list (at most 10000)"`
}

func (t tools) listFiles(ctx context.Context, in PathIn) (Entries, error) {
	l, err := t.c.ListFiles(ctx, in.ID, in.Path)
	if err != nil {
		return Entries{}, err
	}
	out := Entries{Entries: make([]FileEntry, 0, min(len(l.Entries), MaxListEntries))}
	for _, fi := range l.Entries {
		if len(out.Entries) == MaxListEntries {
			out.Truncated = true
			break
		}
		out.Entries = append(out.Entries, entry(fi))
	}
	return out, nil
}

func (t tools) pause(ctx context.Context, in IDIn) (Thing, error) {
	se, err := t.c.PauseSession(ctx, in.ID)
	if err != nil {
		return Thing{}, err
	}
	return sessionThing(*se), nil
}

func (t tools) resume(ctx context.Context, in IDIn) (Thing, error) {
	se, err := t.c.ResumeSession(ctx, in.ID)
	if err != nil {
		return Thing{}, err
	}
	return sessionThing(*se), nil
}

// ForkIn asks for forks of a session.
type ForkIn struct {
	ID    string `json:"id"`
	Count int    `json:"count,omitempty" jsonschema:"how many (default 1, at most 100)"`
}

func (t tools) fork(ctx context.Context, in ForkIn) (Things, error) {
	if in.Count == 0 {
		in.Count = 1
	}
	r, err := t.c.ForkSession(ctx, in.ID, wire.ForkSessionRequest{Count: in.Count})
	if err != nil {
		return Things{}, err
	}
	out := Things{Items: []Thing{}}
	for _, se := range r.Sessions {
		out.Items = append(out.Items, sessionThing(se))
	}
	return out, nil
}

// SnapshotIn asks for a snapshot.
type SnapshotIn struct {
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
}

// SnapshotOut is a snapshot.
type SnapshotOut struct {
	ID        string    `json:"id"`
	Name      string    `json:"name,omitempty"`
	Trigger   string    `json:"trigger" jsonschema:"what took it: manual, pause, rolling, …"`
	State     string    `json:"state"`
	CreatedAt time.Time `json:"created_at"`
	ParentID  string    `json:"parent_id,omitempty"`
}

func snapshotOut(sn wire.Snapshot) SnapshotOut {
	return SnapshotOut{ID: sn.ID, Name: sn.Name, Trigger: sn.Trigger, State: sn.State, CreatedAt: sn.CreatedAt, ParentID: sn.ParentID}
}

func (t tools) snapshot(ctx context.Context, in SnapshotIn) (SnapshotOut, error) {
	sn, err := t.c.SnapshotSession(ctx, in.ID, wire.CreateSnapshotRequest{Name: in.Name})
	if err != nil {
		return SnapshotOut{}, err
	}
	return snapshotOut(*sn), nil
}

// TimelineOut is a session's timeline.
type TimelineOut struct {
	HeadSnapshotID string        `json:"head_snapshot_id,omitempty"`
	Snapshots      []SnapshotOut `json:"snapshots"`
}

func (t tools) timeline(ctx context.Context, in IDIn) (TimelineOut, error) {
	tl, err := t.c.Timeline(ctx, in.ID)
	if err != nil {
		return TimelineOut{}, err
	}
	out := TimelineOut{HeadSnapshotID: tl.HeadSnapshotID, Snapshots: []SnapshotOut{}}
	for _, sn := range tl.Snapshots {
		out.Snapshots = append(out.Snapshots, snapshotOut(sn))
	}
	return out, nil
}

// RestoreIn says where to move a session.
type RestoreIn struct {
	ID         string `json:"id"`
	SnapshotID string `json:"snapshot_id,omitempty" jsonschema:"the snapshot to restore (give this or at)"`
	At         string `json:"at,omitempty" jsonschema:"restore the latest snapshot at or before this time (RFC 3339)"`
}

func (t tools) restore(ctx context.Context, in RestoreIn) (Thing, error) {
	req := wire.RestoreSessionRequest{SnapshotID: in.SnapshotID}
	if in.At != "" {
		at, err := time.Parse(time.RFC3339Nano, in.At)
		if err != nil {
			return Thing{}, fmt.Errorf("at must be an RFC 3339 time: %v", err)
		}
		req.At = &at
	}
	se, err := t.c.RestoreSession(ctx, in.ID, req)
	if err != nil {
		return Thing{}, err
	}
	return sessionThing(*se), nil
}

// DiffIn names two snapshots of a session, and optionally a file.
type DiffIn struct {
	ID   string `json:"id"`
	From string `json:"from" jsonschema:"the earlier snapshot's id"`
	To   string `json:"to" jsonschema:"the later snapshot's id"`
	Path string `json:"path,omitempty" jsonschema:"one file: its unified diff"`
}

func (t tools) diff(ctx context.Context, in DiffIn) (wire.SnapshotDiff, error) {
	var d *wire.SnapshotDiff
	var err error
	if in.Path != "" {
		d, err = t.c.DiffSnapshotFile(ctx, in.ID, in.From, in.To, in.Path)
	} else {
		d, err = t.c.DiffSnapshots(ctx, in.ID, in.From, in.To)
	}
	if err != nil {
		return wire.SnapshotDiff{}, err
	}
	return *d, nil
}

// PortIn names a port of a sandbox or session.
type PortIn struct {
	ID         string `json:"id"`
	Port       int    `json:"port"`
	TTLSeconds int64  `json:"ttl_seconds,omitempty" jsonschema:"how long the URL works (default 3600)"`
}

// PortOut is a URL that reaches a port.
type PortOut struct {
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expires_at"`
}

func (t tools) portURL(ctx context.Context, in PortIn) (PortOut, error) {
	req := wire.CreateAccessTokenRequest{Name: "mcp-port", Scopes: []string{"ports"}, Port: in.Port, TTLSeconds: in.TTLSeconds}
	if strings.HasPrefix(in.ID, "se_") {
		req.SessionID = in.ID
	} else {
		req.SandboxID = in.ID
	}
	tok, err := t.c.CreateAccessToken(ctx, req)
	if err != nil {
		return PortOut{}, err
	}
	if tok.URLs == nil {
		return PortOut{}, errors.New("the server gave no URL for the port")
	}
	u := tok.URLs.Path
	if tok.URLs.Host != "" {
		u = tok.URLs.Host
	}
	if pu, err := url.Parse(u); err == nil && !pu.IsAbs() {
		u = strings.TrimSuffix(t.c.BaseURL(), "/") + u
	}
	return PortOut{URL: u, ExpiresAt: tok.ExpiresAt}, nil
}

// Bounds of run_code.
const (
	DefaultCodeTimeout = 60 * time.Second
	MaxCodeTimeout     = 10 * time.Minute
	// maxCodeImages bounds the images run_code returns; maxCodeHTML what it keeps of a result's HTML.
	maxCodeImages = 8
	maxCodeHTML   = 64 << 10
)

// CodeIn asks to run code.
type CodeIn struct {
	ID             string            `json:"id" jsonschema:"the sandbox or session (of the code-interpreter template)"`
	Code           string            `json:"code" jsonschema:"the Python code"`
	ContextID      string            `json:"context_id,omitempty" jsonschema:"a code context (default: the sandbox's default one)"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"environment variables for this run only"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty" jsonschema:"interrupt the run past this (default 60, at most 600)"`
	OutputBytes    int               `json:"output_bytes,omitempty" jsonschema:"at most this much of each of stdout and stderr, the end kept (default 65536, at most 1048576)"`
}

// CodeOut is a run's output; its charts come as the result's images.
type CodeOut struct {
	Stdout          string          `json:"stdout"`
	Stderr          string          `json:"stderr"`
	StdoutTruncated bool            `json:"stdout_truncated,omitempty"`
	StderrTruncated bool            `json:"stderr_truncated,omitempty"`
	Text            string          `json:"text,omitempty" jsonschema:"the last expression's value"`
	Results         []CodeResultOut `json:"results,omitempty"`
	Error           *wire.CodeError `json:"error,omitempty"`
	ExecutionCount  int             `json:"execution_count"`
}

// CodeResultOut is one result of a run, its images left to the tool result's image content.
type CodeResultOut struct {
	IsMainResult bool     `json:"is_main_result,omitempty"`
	Text         string   `json:"text,omitempty"`
	HTML         string   `json:"html,omitempty"`
	Markdown     string   `json:"markdown,omitempty"`
	JSON         any      `json:"json,omitempty"`
	Formats      []string `json:"formats" jsonschema:"the representations it has (png: among the images)"`
}

func (t tools) runCode(ctx context.Context, _ *mcp.CallToolRequest, in CodeIn) (*mcp.CallToolResult, CodeOut, error) {
	timeout := DefaultCodeTimeout
	if in.TimeoutSeconds != 0 {
		timeout = time.Duration(in.TimeoutSeconds) * time.Second
	}
	if timeout <= 0 || timeout > MaxCodeTimeout {
		return nil, CodeOut{}, fmt.Errorf("timeout_seconds must be between 1 and %d", int(MaxCodeTimeout/time.Second))
	}
	limit := DefaultOutputBytes
	if in.OutputBytes != 0 {
		limit = in.OutputBytes
	}
	if limit < 0 || limit > MaxOutputBytes {
		return nil, CodeOut{}, fmt.Errorf("output_bytes must be between 1 and %d", MaxOutputBytes)
	}
	ex, err := t.c.RunCode(ctx, in.ID, wire.RunCodeRequest{Code: in.Code, ContextID: in.ContextID, Env: in.Env,
		TimeoutSeconds: int(timeout / time.Second)}, nil)
	if err != nil {
		return nil, CodeOut{}, err
	}
	out := CodeOut{Error: ex.Error, ExecutionCount: ex.ExecutionCount}
	out.Text, _ = tail(ex.Text(), limit)
	out.Stdout, out.StdoutTruncated = tail(strings.Join(ex.Stdout, ""), limit)
	out.Stderr, out.StderrTruncated = tail(strings.Join(ex.Stderr, ""), limit)
	res := &mcp.CallToolResult{}
	var images []mcp.Content
	for _, r := range ex.Results {
		ro := CodeResultOut{IsMainResult: r.IsMainResult, Formats: []string{}}
		ro.Text, _ = tail(r.Text, limit)
		ro.Markdown, _ = tail(r.Markdown, maxCodeHTML)
		ro.HTML, _ = tail(r.HTML, maxCodeHTML)
		if len(r.JSON) > 0 && len(r.JSON) <= maxCodeHTML {
			ro.JSON = r.JSON
		}
		for _, f := range [][2]string{{"text", r.Text}, {"html", r.HTML}, {"markdown", r.Markdown}, {"svg", r.SVG}, {"png", r.PNG},
			{"jpeg", r.JPEG}, {"pdf", r.PDF}, {"latex", r.LaTeX}, {"json", string(r.JSON)}, {"javascript", r.JavaScript}} {
			if f[1] != "" {
				ro.Formats = append(ro.Formats, f[0])
			}
		}
		for _, img := range [][2]string{{"image/png", r.PNG}, {"image/jpeg", r.JPEG}} {
			if img[1] == "" || len(images) == maxCodeImages {
				continue
			}
			if b, err := base64.StdEncoding.DecodeString(strings.ReplaceAll(img[1], "\n", "")); err == nil {
				images = append(images, &mcp.ImageContent{Data: b, MIMEType: img[0]})
			}
		}
		out.Results = append(out.Results, ro)
	}
	if len(images) > 0 {
		// The structured output as text first (what clients without structured content read), then the images.
		b, err := json.Marshal(out)
		if err != nil {
			return nil, CodeOut{}, err
		}
		res.Content = append([]mcp.Content{&mcp.TextContent{Text: string(b)}}, images...)
	}
	return res, out, nil
}
