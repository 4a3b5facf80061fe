package airlock

import (
	"encoding/json"
	"strconv"
	"time"
)

// Sandbox states, as the API reports them.
const (
	StateCreating = "creating"
	StateRunning  = "running"
	StateStopping = "stopping"
	StateStopped  = "stopped"
	StateFailed   = "failed"
)

// CreateSandboxRequest is the body of POST /v1/sandboxes. Zero fields take the server's defaults.
type CreateSandboxRequest struct {
	// Template to boot; "" is "default".
	Template string `json:"template,omitempty"`
	// Env is the base environment of every process in the sandbox. It is never stored or logged.
	Env map[string]string `json:"env,omitempty"`
	// CPU is the CPU quota in millicores (1000 = one core); 0 is 1000.
	CPU int `json:"cpu,omitempty"`
	// MemoryMB is the memory limit in MiB; 0 is 512.
	MemoryMB int `json:"memory_mb,omitempty"`
	// DiskMB is the size of the writable layer in MiB; 0 is 1024.
	DiskMB int `json:"disk_mb,omitempty"`
	// TimeoutSeconds is the sandbox's lifetime; 0 is 300. When it passes, the sandbox is destroyed.
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
	// Metadata are the caller's labels, filterable in lists.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Network is the egress policy; nil denies everything.
	Network *NetworkPolicy `json:"network,omitempty"`
	// Runtime is "gvisor" (the default), "runc" (faster start, weaker isolation: the tenant must be
	// allowed it), or "auto" (the server chooses).
	Runtime string `json:"runtime,omitempty"`
}

// Sandbox is a sandbox as the API reports it.
type Sandbox struct {
	ID             string            `json:"id"`
	Template       string            `json:"template"`
	State          string            `json:"state"`
	Reason         string            `json:"reason,omitempty"`
	CPU            int               `json:"cpu"`
	MemoryMB       int               `json:"memory_mb"`
	DiskMB         int               `json:"disk_mb"`
	TimeoutSeconds int               `json:"timeout_seconds"`
	Metadata       map[string]string `json:"metadata"`
	CreatedAt      time.Time         `json:"created_at"`
	StartedAt      *time.Time        `json:"started_at,omitempty"`
	EndsAt         *time.Time        `json:"ends_at,omitempty"`
	StoppedAt      *time.Time        `json:"stopped_at,omitempty"`
	// Network is the sandbox's egress policy.
	Network NetworkPolicy `json:"network"`
	// Runtime runs the sandbox, chosen for RuntimeReason; Abilities are what it can do beyond running
	// ("memory_snapshots", "files_snapshots", "fork").
	Runtime       string   `json:"runtime"`
	RuntimeReason string   `json:"runtime_reason,omitempty"`
	Abilities     []string `json:"abilities"`
	// Node is the node it was placed on.
	Node string `json:"node,omitempty"`
}

// SandboxList is one page of GET /v1/sandboxes.
type SandboxList struct {
	Sandboxes  []Sandbox `json:"sandboxes"`
	NextCursor string    `json:"next_cursor,omitempty"`
}

// SetTimeoutRequest is the body of POST /v1/sandboxes/{id}/timeout: the sandbox ends TimeoutSeconds from now.
type SetTimeoutRequest struct {
	TimeoutSeconds int `json:"timeout_seconds"`
}

// ExecRequest is the body of POST /v1/sandboxes/{id}/exec (run to completion), and the first message of
// the exec WebSocket stream.
type ExecRequest struct {
	// Cmd is the argv; Cmd[0] is looked up in PATH. Empty runs the template's own command (an image's
	// Entrypoint followed by its Cmd); an error if it has none.
	Cmd []string `json:"cmd,omitempty"`
	// Env adds to the sandbox's environment.
	Env map[string]string `json:"env,omitempty"`
	// Cwd is the working directory; "" is the user's home.
	Cwd string `json:"cwd,omitempty"`
	// User runs the process as this user ("user", the default, or "root", or a uid).
	User string `json:"user,omitempty"`
	// Stdin is fed to the process, then closed (run-to-completion exec only).
	Stdin string `json:"stdin,omitempty"`
	// TimeoutSeconds kills the process after this long (run-to-completion exec: default 60, max 3600).
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
	// PTY runs the process on a terminal of this size (stream only).
	PTY *PTYSize `json:"pty,omitempty"`
}

// PTYSize is a terminal size.
type PTYSize struct {
	Rows int `json:"rows"`
	Cols int `json:"cols"`
}

// ExecResult is the response of a run-to-completion exec.
type ExecResult struct {
	ExitCode int `json:"exit_code"`
	// Signal names the signal that killed the process, if one did.
	Signal          string `json:"signal,omitempty"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
	TimedOut        bool   `json:"timed_out,omitempty"`
	DurationMS      int64  `json:"duration_ms"`
}

// Process is a process the in-sandbox daemon started.
type Process struct {
	ID        string    `json:"id"`
	PID       int       `json:"pid"`
	Cmd       []string  `json:"cmd"`
	User      string    `json:"user"`
	PTY       bool      `json:"pty"`
	Running   bool      `json:"running"`
	ExitCode  *int      `json:"exit_code,omitempty"`
	Signal    string    `json:"signal,omitempty"`
	StartedAt time.Time `json:"started_at"`
}

// ProcessList is the response of GET /v1/sandboxes/{id}/processes.
type ProcessList struct {
	Processes []Process `json:"processes"`
}

// SignalRequest is the body of POST /v1/sandboxes/{id}/processes/{pid}/signal.
type SignalRequest struct {
	// Signal is a name ("TERM", "SIGKILL") or a number.
	Signal string `json:"signal"`
}

// FileInfo describes a file in a sandbox.
type FileInfo struct {
	Name string `json:"name"`
	Path string `json:"path"`
	// Type is "file", "dir", "symlink" or "other".
	Type    string    `json:"type"`
	Size    int64     `json:"size"`
	Mode    string    `json:"mode"` // octal permission bits, e.g. "0644"
	ModTime time.Time `json:"mod_time"`
	// Target is a symlink's target.
	Target string `json:"target,omitempty"`
}

// FileList is the response of GET /v1/sandboxes/{id}/files/list.
type FileList struct {
	Entries []FileInfo `json:"entries"`
}

// MkdirRequest is the body of POST /v1/sandboxes/{id}/files/mkdir; parents are created as needed.
type MkdirRequest struct {
	Path string `json:"path"`
}

// MoveRequest is the body of POST /v1/sandboxes/{id}/files/move.
type MoveRequest struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// ErrorBody is every error response: {"error":{"code":"not_found","message":"…"}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the code and message of an API error.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Stream messages of the exec and attach WebSockets. Text frames carry JSON StreamMessage values; binary
// frames carry process data, their first byte naming the stream (StreamStdin, StreamStdout, StreamStderr).
const (
	StreamStdin  byte = 0
	StreamStdout byte = 1
	StreamStderr byte = 2
)

// StreamMessage is a JSON control message on an exec or attach WebSocket.
//
// Client to server: "resize" (Rows, Cols), "signal" (Signal), "close_stdin".
// Server to client: "started" (ProcessID), "exit" (ExitCode, Signal), "dropped" (Stream, Bytes: output
// that was produced while no client was attached and did not fit the buffer), "error" (Error).
type StreamMessage struct {
	Type      string       `json:"type"`
	ProcessID string       `json:"process_id,omitempty"`
	Rows      int          `json:"rows,omitempty"`
	Cols      int          `json:"cols,omitempty"`
	Signal    string       `json:"signal,omitempty"`
	ExitCode  *int         `json:"exit_code,omitempty"`
	Stream    string       `json:"stream,omitempty"`
	Bytes     int64        `json:"bytes,omitempty"`
	Error     *ErrorDetail `json:"error,omitempty"`
}

// NetworkPolicy is a sandbox's egress policy: what it may connect to. The zero value (and a sandbox
// created without one) denies everything. Rules are evaluated in order and the first match decides;
// then Default applies. Loopback, private, link-local, metadata and the host's own addresses stay
// unreachable, even with Default "allow", unless an allow rule's CIDRs name them.
type NetworkPolicy struct {
	// Default is "deny" (also when empty) or "allow".
	Default string `json:"default,omitempty"`
	// Rules, at most 256.
	Rules []NetworkRule `json:"rules,omitempty"`
	// Credentials the gateway injects into HTTPS requests (never into plain HTTP); at most 64. They
	// allow nothing by themselves: a rule must allow the request.
	Credentials []CredentialBinding `json:"credentials,omitempty"`
	// PublicPorts are the sandbox's ports anyone may reach through the ingress without a credential
	// (all others need an API key or an access token with scope ports); at most 64.
	PublicPorts []int `json:"public_ports,omitempty"`
	// Limits cap the sandbox's connections through the gateway; nil: the defaults.
	Limits *NetworkLimits `json:"limits,omitempty"`
}

// NetworkLimits cap one sandbox's connections through the gateway: past them its new connections are
// refused and the flow log says so, and other sandboxes are unaffected. Zero fields: the defaults.
type NetworkLimits struct {
	// MaxConnections bounds its connections in flight (default 256, at most 4096).
	MaxConnections int `json:"max_connections,omitempty"`
	// ConnectionsPerSecond bounds its new connections a second, in bursts of up to twice as many
	// (default 100, at most 2000).
	ConnectionsPerSecond int `json:"connections_per_second,omitempty"`
}

// CredentialBinding puts a secret's value (or an OAuth connection's access token) into the HTTPS
// requests it matches, outside the sandbox: the sandbox never holds the value. Set exactly one of
// Header, BasicAuthUser and Placeholder (for a connection, none means a bearer Authorization header).
type CredentialBinding struct {
	// Name identifies the binding in the flow log.
	Name string `json:"name"`
	// Host is an exact name or a "*.suffix" wildcard.
	Host string `json:"host"`
	// Methods and PathPrefix restrict the binding to some requests.
	Methods    []string `json:"methods,omitempty"`
	PathPrefix string   `json:"path_prefix,omitempty"`
	// Secret names the secret (see CreateSecret). Set Secret or Connection.
	Secret string `json:"secret,omitempty"`
	// Connection names an OAuth connection (see CreateConnection) whose current access token is the
	// value; with no Header, BasicAuthUser or Placeholder it sets "Authorization: Bearer <token>".
	Connection string `json:"connection,omitempty"`
	// Header is set to Format with "{secret}" replaced by the value ("Bearer {secret}"; default
	// "{secret}").
	Header string `json:"header,omitempty"`
	Format string `json:"format,omitempty"`
	// BasicAuthUser sets HTTP basic auth of this user and the value.
	BasicAuthUser string `json:"basic_auth_user,omitempty"`
	// Placeholder is replaced by the value wherever it appears in a header value: give the sandbox the
	// placeholder (say as OPENAI_API_KEY) and its code works unchanged.
	Placeholder string `json:"placeholder,omitempty"`
}

// NetworkRule allows or denies the connections (and, for HTTP, the requests) that match every field it
// sets. It sets Host, CIDRs or both.
type NetworkRule struct {
	// Name identifies the rule in refusals and logs; "rule[i]" when empty.
	Name string `json:"name,omitempty"`
	// Action is "allow" or "deny".
	Action string `json:"action"`
	// Host is an exact name ("api.example.com") or a wildcard ("*.example.com": any subdomain, not the
	// apex).
	Host string `json:"host,omitempty"`
	// Ports are single ports ("443") or inclusive ranges ("8000-8100"); empty means any.
	Ports []PortRange `json:"ports,omitempty"`
	// CIDRs the dialed address must lie in ("203.0.113.0/24").
	CIDRs []string `json:"cidrs,omitempty"`
	// Methods are HTTP methods ("GET"); only with Host.
	Methods []string `json:"methods,omitempty"`
	// PathPrefix restricts the rule to HTTP requests under this path; only with Host.
	PathPrefix string `json:"path_prefix,omitempty"`
}

// PortRange is one port ("443") or an inclusive range ("8000-8100"). In JSON the server writes a single
// port as a number and a range as a string; both are read.
type PortRange string

// UnmarshalJSON accepts a number or a string.
func (p *PortRange) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*p = PortRange(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return err
	}
	*p = PortRange(n.String())
	return nil
}

// Flow decisions and protocols, as the API reports them.
const (
	DecisionAllow = "allow"
	DecisionDeny  = "deny"

	ProtocolTLS  = "tls"
	ProtocolHTTP = "http"
	ProtocolTCP  = "tcp"
)

// Flow is one connection a sandbox opened (or tried to open) through the network gateway, or for plain
// HTTP one request on such a connection. It never holds header or body content.
type Flow struct {
	// Start is when the gateway accepted the connection (a later HTTP request on a connection: when its
	// head arrived); End is when the flow ended.
	Start      time.Time `json:"start"`
	End        time.Time `json:"end"`
	DurationMS int64     `json:"duration_ms"`
	SandboxID  string    `json:"sandbox_id"`
	TenantID   string    `json:"tenant_id,omitempty"`
	// SrcPort is the sandbox's source port; the HTTP requests of one connection share it.
	SrcPort int `json:"src_port"`
	// DstIP is the address the gateway dialed or, for a refusal, the address the sandbox dialed.
	DstIP   string `json:"dst_ip"`
	DstPort int    `json:"dst_port"`
	// Host is the destination name: the TLS SNI, the HTTP Host, or the name the sandbox resolved for
	// DstIP. Empty when there was none.
	Host string `json:"host,omitempty"`
	// Protocol is ProtocolTLS, ProtocolHTTP or ProtocolTCP.
	Protocol string `json:"protocol"`
	// Decision is DecisionAllow or DecisionDeny.
	Decision string `json:"decision"`
	// Rule names what decided: a rule's name, "default", a guard ("guard:private", …) or a check of the
	// gateway's own ("resolve", "mismatch", "host-changed", "malformed-http").
	Rule   string `json:"rule,omitempty"`
	Reason string `json:"reason,omitempty"`
	// BytesSent counts the bytes relayed from the sandbox to the upstream, BytesReceived the other way.
	// Both are 0 for a refused flow.
	BytesSent     int64 `json:"bytes_sent"`
	BytesReceived int64 `json:"bytes_received"`
	// Method and Path are the HTTP request's (Path without the query string).
	Method string `json:"method,omitempty"`
	Path   string `json:"path,omitempty"`
	// Binding names the credential binding applied to the flow, never its value.
	Binding string `json:"binding,omitempty"`
	// Error says why an allowed flow failed upstream.
	Error string `json:"error,omitempty"`
}

// FlowList is the response of GET /v1/sandboxes/{id}/egress: flows newest first.
type FlowList struct {
	Flows []Flow `json:"flows"`
}

// Metric is one reading of a sandbox's resource use, taken by its node from the host.
type Metric struct {
	// Time is when it was taken.
	Time time.Time `json:"time"`
	// CPUCount is the sandbox's CPU limit in whole cores, rounded up.
	CPUCount int `json:"cpu_count"`
	// CPUUsedPct is the CPU the sandbox used since the reading before, in percent of CPUCount cores
	// over that interval: 0 to 100.
	CPUUsedPct float64 `json:"cpu_used_pct"`
	// MemoryUsedBytes is the memory charged to the sandbox less what the kernel can drop at once (its
	// working set); MemoryCacheBytes the host page cache charged to it; MemoryTotalBytes its limit.
	MemoryUsedBytes  int64 `json:"memory_used_bytes"`
	MemoryCacheBytes int64 `json:"memory_cache_bytes"`
	MemoryTotalBytes int64 `json:"memory_total_bytes"`
	// DiskUsedBytes and DiskTotalBytes are the bytes used and the size of its writable disk, as its
	// file system counts them (a little under the disk limit).
	DiskUsedBytes  int64 `json:"disk_used_bytes"`
	DiskTotalBytes int64 `json:"disk_total_bytes"`
}

// MetricList is the response of GET /v1/sandboxes/{id}/metrics and GET /v1/sessions/{id}/metrics:
// readings oldest first.
type MetricList struct {
	// SandboxID names the sandbox the readings are of: for a session, the one that runs it now (empty
	// when none does).
	SandboxID string   `json:"sandbox_id,omitempty"`
	Metrics   []Metric `json:"metrics"`
}

// CreateSecretRequest is the body of POST /v1/secrets. The value is write-only: no response ever
// carries it.
type CreateSecretRequest struct {
	// Name is 1-128 letters, digits or _.-
	Name string `json:"name"`
	// Value is the secret, at most 64 KiB.
	Value string `json:"value"`
}

// UpdateSecretRequest is the body of PUT /v1/secrets/{name}: a new value, which makes a new version.
type UpdateSecretRequest struct {
	Value string `json:"value"`
}

// Secret describes a secret, never its value.
type Secret struct {
	Name      string    `json:"name"`
	Version   int64     `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// SecretList is the response of GET /v1/secrets.
type SecretList struct {
	Secrets []Secret `json:"secrets"`
}

// MarshalJSON writes a single port as a number and a range as a string, as the server does.
func (p PortRange) MarshalJSON() ([]byte, error) {
	if n, err := strconv.Atoi(string(p)); err == nil && n >= 0 && strconv.Itoa(n) == string(p) {
		return []byte(string(p)), nil
	}
	return json.Marshal(string(p))
}

// OAuthProvider says where and as whom a connection signs in. Set Issuer (for OpenID Connect
// discovery) or the endpoints the flow needs; explicit endpoints win. URLs are https, or http to a
// loopback address.
type OAuthProvider struct {
	Issuer                 string   `json:"issuer,omitempty"`
	AuthorizationURL       string   `json:"authorization_url,omitempty"`
	TokenURL               string   `json:"token_url,omitempty"`
	DeviceAuthorizationURL string   `json:"device_authorization_url,omitempty"`
	RevocationURL          string   `json:"revocation_url,omitempty"`
	ClientID               string   `json:"client_id"`
	Scopes                 []string `json:"scopes,omitempty"`
	// ClientSecret is write-only: stored encrypted, never returned.
	ClientSecret string `json:"client_secret,omitempty"`
}

// CreateConnectionRequest is the body of POST /v1/connections.
type CreateConnectionRequest struct {
	Name string `json:"name"`
	// Flow is "authorization_code" (with PKCE; the user opens Authorization.URL) or "device" (the
	// user enters Authorization.UserCode at Authorization.VerificationURI).
	Flow     string        `json:"flow"`
	Provider OAuthProvider `json:"provider"`
}

// Connection describes an OAuth connection: the control plane signs in outside every sandbox, keeps
// the tokens encrypted and refreshes them before they expire; a credential binding that names the
// connection injects its access token. Tokens and the client secret are never returned.
type Connection struct {
	Name string `json:"name"`
	Flow string `json:"flow"`
	// Status is "pending" (signing in), "active", "failed" (see Error) or "revoked".
	Status          string        `json:"status"`
	Provider        OAuthProvider `json:"provider"`
	HasClientSecret bool          `json:"has_client_secret"`
	Error           string        `json:"error,omitempty"`
	CreatedAt       time.Time     `json:"created_at"`
	UpdatedAt       time.Time     `json:"updated_at"`
	ConnectedAt     *time.Time    `json:"connected_at,omitempty"`
	TokenExpiresAt  *time.Time    `json:"token_expires_at,omitempty"`
	RefreshedAt     *time.Time    `json:"refreshed_at,omitempty"`
	Refreshes       int           `json:"refreshes"`
	CanRefresh      bool          `json:"can_refresh"`
}

// ConnectionAuthorization is what the user does to finish signing in.
type ConnectionAuthorization struct {
	// URL to open in a browser (authorization code flow).
	URL string `json:"url,omitempty"`
	// UserCode to enter at VerificationURI (device flow); VerificationURIComplete has it filled in.
	UserCode                string    `json:"user_code,omitempty"`
	VerificationURI         string    `json:"verification_uri,omitempty"`
	VerificationURIComplete string    `json:"verification_uri_complete,omitempty"`
	ExpiresAt               time.Time `json:"expires_at"`
}

// ConnectionSignIn is the response of POST /v1/connections and POST /v1/connections/{name}/authorize.
type ConnectionSignIn struct {
	Connection    Connection              `json:"connection"`
	Authorization ConnectionAuthorization `json:"authorization"`
}

// ConnectionList is the response of GET /v1/connections.
type ConnectionList struct {
	Connections []Connection `json:"connections"`
}

// CreateSessionRequest is the body of POST /v1/sessions: a sandbox request without a timeout, plus
// when to pause.
type CreateSessionRequest struct {
	Template string            `json:"template,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	CPU      int               `json:"cpu,omitempty"`
	MemoryMB int               `json:"memory_mb,omitempty"`
	DiskMB   int               `json:"disk_mb,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Network  *NetworkPolicy    `json:"network,omitempty"`
	// IdleTimeoutSeconds pauses the session after that long without exec, file or port work; nil is
	// 600, 0 never pauses it.
	IdleTimeoutSeconds *int `json:"idle_timeout_seconds,omitempty"`
	// AutoResume resumes the paused session when work arrives for it; nil is true.
	AutoResume *bool `json:"auto_resume,omitempty"`
	// RollingIntervalSeconds takes a snapshot that often while the session runs, if it changed; nil is
	// 60, 0 never, otherwise at least 15.
	RollingIntervalSeconds *int `json:"rolling_interval_seconds,omitempty"`
	// Retention overrides the tenant's retention of the session's snapshots, field by field.
	Retention *Retention `json:"retention,omitempty"`
	// Runtime is as for sandboxes; "auto" gives a session gVisor, whose snapshots keep memory and
	// processes. A runc session's snapshots hold its files only: a resume starts its processes anew.
	Runtime string `json:"runtime,omitempty"`
	// TimeoutSeconds bounds each run of the session (from its create, or a resume) to that long;
	// 0, the default, does not: the session lives until deleted.
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
	// OnTimeout is what the end of a run does: "delete" (the default) or "pause".
	OnTimeout string `json:"on_timeout,omitempty"`
}

// Session states.
const (
	SessionCreating = "creating"
	SessionRunning  = "running"
	SessionPausing  = "pausing"
	SessionPaused   = "paused"
	SessionResuming = "resuming"
	SessionFailed   = "failed"
	SessionDeleting = "deleting"
	SessionDeleted  = "deleted"
)

// Session is long-lived work: it runs in one sandbox at a time, pauses into a snapshot of memory and
// files, resumes into a new sandbox, and forks.
type Session struct {
	ID                 string            `json:"id"`
	State              string            `json:"state"`
	Reason             string            `json:"reason,omitempty"`
	Template           string            `json:"template"`
	CPU                int               `json:"cpu"`
	MemoryMB           int               `json:"memory_mb"`
	DiskMB             int               `json:"disk_mb"`
	Metadata           map[string]string `json:"metadata"`
	Network            *NetworkPolicy    `json:"network,omitempty"`
	IdleTimeoutSeconds int               `json:"idle_timeout_seconds"`
	AutoResume         bool              `json:"auto_resume"`
	// RollingIntervalSeconds is how often a rolling snapshot is taken while it runs; 0 never.
	RollingIntervalSeconds int `json:"rolling_interval_seconds"`
	// Retention is the session's own override of its tenant's retention; nil when none.
	Retention            *Retention `json:"retention,omitempty"`
	SandboxID            string     `json:"sandbox_id,omitempty"`
	HeadSnapshotID       string     `json:"head_snapshot_id,omitempty"`
	ParentSessionID      string     `json:"parent_session_id,omitempty"`
	ForkedFromSnapshotID string     `json:"forked_from_snapshot_id,omitempty"`
	CreatedAt            time.Time  `json:"created_at"`
	UpdatedAt            time.Time  `json:"updated_at"`
	LastActivityAt       time.Time  `json:"last_activity_at"`
	PausedAt             *time.Time `json:"paused_at,omitempty"`
	// TimeoutSeconds bounds each run (0: none); the running session ends at EndsAt, as OnTimeout says.
	TimeoutSeconds int        `json:"timeout_seconds"`
	OnTimeout      string     `json:"on_timeout"`
	EndsAt         *time.Time `json:"ends_at,omitempty"`
	// Runtime runs the session's sandboxes, chosen for RuntimeReason; Abilities as for sandboxes.
	Runtime       string   `json:"runtime"`
	RuntimeReason string   `json:"runtime_reason,omitempty"`
	Abilities     []string `json:"abilities"`
	// Node is the node its sandbox runs on (empty while it has none).
	Node string `json:"node,omitempty"`
}

// SessionList is the response of GET /v1/sessions.
type SessionList struct {
	Sessions   []Session `json:"sessions"`
	NextCursor string    `json:"next_cursor,omitempty"`
}

// ForkSessionRequest is the body of POST /v1/sessions/{id}/fork.
type ForkSessionRequest struct {
	// Count is how many sessions to make, 1 to 100.
	Count int `json:"count"`
	// SnapshotID forks from that snapshot; empty forks from the session's current state.
	SnapshotID string `json:"snapshot_id,omitempty"`
}

// ForkSessionResult is the response of POST /v1/sessions/{id}/fork.
type ForkSessionResult struct {
	Sessions []Session `json:"sessions"`
}

// CreateSnapshotRequest is the body of POST /v1/sessions/{id}/snapshots.
type CreateSnapshotRequest struct {
	// Name is optional, unique within the session.
	Name string `json:"name,omitempty"`
}

// Snapshot is a saved state of a session: memory, processes and files.
type Snapshot struct {
	ID        string `json:"id"`
	SessionID string `json:"session_id"`
	ParentID  string `json:"parent_id,omitempty"`
	Name      string `json:"name,omitempty"`
	// Trigger is "manual", "pause", "fork" or "rolling".
	Trigger string `json:"trigger"`
	// State is "writing" while the checkpoint is taken; "uploading" once the image is saved on the node
	// (sessions can resume and fork from it) while the snapshot store takes it in; "complete" once the
	// store holds it; or "failed", with Reason.
	State        string    `json:"state"`
	Reason       string    `json:"reason,omitempty"`
	Pinned       bool      `json:"pinned"`
	LogicalBytes int64     `json:"logical_bytes"`
	StoredBytes  int64     `json:"stored_bytes"`
	CreatedAt    time.Time `json:"created_at"`
	// CompletedAt is when the snapshot store held it (State "complete"): from then on any node can
	// restore it, and a failover resumes from the newest such snapshot (WaitSnapshot waits for it).
	CompletedAt *time.Time `json:"completed_at,omitempty"`
	// Kind is "memory" (memory, processes and files: a resume continues the processes) or "files"
	// (files only: a resume starts the processes anew).
	Kind string `json:"kind"`
}

// SnapshotList is the response of GET /v1/sessions/{id}/snapshots.
type SnapshotList struct {
	Snapshots  []Snapshot `json:"snapshots"`
	NextCursor string     `json:"next_cursor,omitempty"`
}
