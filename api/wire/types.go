package wire

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

// Health is the response of GET /v1/health: Status "ok" while the server serves.
type Health struct {
	Status string `json:"status"`
}

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

// Tenancy: tenants, quotas, API keys, access tokens, the audit log.

// API key scopes: each includes the ones after it.
const (
	ScopeAdmin = "admin" // also manages the tenant's keys (and, for the operator tenant, the tenants)
	ScopeWrite = "write" // creates, changes, deletes, runs processes, writes files
	ScopeRead  = "read"  // gets, lists, reads files
)

// Access token scopes.
const (
	TokenScopeExec  = "exec"  // exec, process streams, the process list, attach, signals
	TokenScopeFiles = "files" // every file route; writes as root, so it can plant code: as strong as exec
	TokenScopePorts = "ports" // the sandbox's ports; running code on the code interpreter's (49999) needs exec too
)

// Tenant is a tenant as the API reports it.
type Tenant struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Operator marks the tenant whose admin keys also manage the other tenants.
	Operator   bool       `json:"operator"`
	Disabled   bool       `json:"disabled"`
	DisabledAt *time.Time `json:"disabled_at,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	Quotas     Quotas     `json:"quotas"`
	// KeyProvider holds the tenant's key-encryption keys: "local" (the server's keyring) or "pkcs11"
	// (an HSM or KMS through PKCS#11).
	KeyProvider string `json:"key_provider"`
	// Runtimes are the runtimes the tenant's sandboxes may run on; "*" is every one. By default the
	// operator's tenant may use every runtime and the others gvisor only.
	Runtimes []string `json:"runtimes,omitempty"`
}

// TenantKey is the response of GET /v1/key.
type TenantKey struct {
	Provider string `json:"provider"`
	// Status is "available" or "unavailable" (revoked, destroyed, or cannot be reached; Error says).
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

// RotatedKey is the response of POST /v1/key/rotate.
type RotatedKey struct {
	KeyID string `json:"key_id"`
}

// RevokeKeyRequest is the body of POST /v1/key/revoke: Confirm must be the tenant's ID.
type RevokeKeyRequest struct {
	Confirm string `json:"confirm"`
}

// Quotas bound what a tenant may hold at once; 0 is no limit.
type Quotas struct {
	// RunningSandboxes counts sandboxes creating, running or stopping, sessions' included.
	RunningSandboxes int64 `json:"running_sandboxes"`
	// Sessions counts sessions not deleted.
	Sessions int64 `json:"sessions"`
	// SnapshotBytes counts the bytes the tenant's snapshots added to the snapshot store. Pauses are
	// never refused for it; other snapshots and forks are.
	SnapshotBytes int64 `json:"snapshot_bytes"`
}

// Usage is the response of GET /v1/usage: the caller's tenant's quotas and what counts against them.
type Usage struct {
	Quotas Quotas `json:"quotas"`
	Usage  Quotas `json:"usage"`
	// Tenant is the ID of the key's tenant; Operator, whether that is the operator tenant.
	Tenant   string `json:"tenant,omitempty"`
	Operator bool   `json:"operator,omitempty"`
}

// TenantList is the response of GET /v1/tenants.
type TenantList struct {
	Tenants []Tenant `json:"tenants"`
}

// CreateTenantRequest is the body of POST /v1/tenants.
type CreateTenantRequest struct {
	Name string `json:"name"`
	// KeyProvider is "local" (or empty) or "pkcs11" (the server must run with --pkcs11-module).
	KeyProvider string `json:"key_provider,omitempty"`
}

// CreatedTenant is the response of POST /v1/tenants: the tenant and its first admin key, shown only
// this once.
type CreatedTenant struct {
	Tenant Tenant    `json:"tenant"`
	APIKey NewAPIKey `json:"api_key"`
}

// UpdateTenantRequest is the body of PATCH /v1/tenants/{id}; nil fields stay as they are.
type UpdateTenantRequest struct {
	// Disabled refuses (true) or accepts again (false) the tenant's keys and tokens.
	Disabled *bool `json:"disabled,omitempty"`
	// Quotas replaces all of the tenant's quotas.
	Quotas *Quotas `json:"quotas,omitempty"`
	// Runtimes replaces the runtimes the tenant may use ("*": every one; empty: the default).
	Runtimes *[]string `json:"runtimes,omitempty"`
}

// APIKey describes an API key, never the key itself.
type APIKey struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Scope      string     `json:"scope"`
	Prefix     string     `json:"prefix"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
}

// NewAPIKey is a new API key with the key itself, which is shown only once.
type NewAPIKey struct {
	APIKey
	Key string `json:"key"`
}

// APIKeyList is the response of GET /v1/api-keys.
type APIKeyList struct {
	APIKeys []APIKey `json:"api_keys"`
}

// CreateAPIKeyRequest is the body of POST /v1/api-keys.
type CreateAPIKeyRequest struct {
	Name string `json:"name"`
	// Scope is admin, write or read.
	Scope string `json:"scope"`
}

// AccessToken describes an access token, never the token itself.
type AccessToken struct {
	ID        string   `json:"id"`
	Name      string   `json:"name,omitempty"`
	SandboxID string   `json:"sandbox_id,omitempty"`
	SessionID string   `json:"session_id,omitempty"`
	Scopes    []string `json:"scopes"`
	// Port, if not 0, is the one port the token reaches (scope ports).
	Port   int    `json:"port,omitempty"`
	Prefix string `json:"prefix"`
	// CreatedBy is the ID of the API key that made the token: the token dies with it.
	CreatedBy string     `json:"created_by,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt time.Time  `json:"expires_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// NewAccessToken is a new access token with the token itself, which is shown only once.
type NewAccessToken struct {
	AccessToken
	Token string `json:"token"`
	// URLs open the token's port with the token in the URL (airlock_token=…), for a browser: the first
	// request sets a cookie for the rest. Set for tokens made for one port.
	URLs *PortURLs `json:"urls,omitempty"`
}

// PortURLs are the two forms of a URL that reaches a sandbox's port through the API's ingress.
type PortURLs struct {
	// Path is under the API's own address: /v1/sandboxes/{id}/ports/{port}/.
	Path string `json:"path"`
	// Host is <port>-<id>.<ingress domain>, the form to give a browser: the sandbox's pages get an
	// origin of their own. Empty when the server has no ingress domain.
	Host string `json:"host,omitempty"`
}

// AccessTokenList is the response of GET /v1/tokens.
type AccessTokenList struct {
	Tokens []AccessToken `json:"tokens"`
}

// CreateAccessTokenRequest is the body of POST /v1/tokens. Set SandboxID or SessionID.
type CreateAccessTokenRequest struct {
	Name      string   `json:"name,omitempty"`
	SandboxID string   `json:"sandbox_id,omitempty"`
	SessionID string   `json:"session_id,omitempty"`
	Scopes    []string `json:"scopes"`
	// TTLSeconds is the token's lifetime; 0 is one hour, at most 7 days.
	TTLSeconds int64 `json:"ttl_seconds,omitempty"`
	// Port restricts the token to one port of the sandbox (it needs scope ports); the answer then
	// carries URLs for it. 0: every port.
	Port int `json:"port,omitempty"`
}

// AuditEntry is one line of a tenant's audit log export (GET /v1/audit, JSON lines). Each entry
// carries the hash of the one before it; `airlock audit verify` checks the chain.
type AuditEntry struct {
	Tenant string    `json:"tenant"`
	Seq    int64     `json:"seq"`
	Time   time.Time `json:"time"`
	// Kind is "api", "daemon", "egress", or "audit" for entries about the log itself (action "prune":
	// a retention cut, whose detail names the last entry deleted).
	Kind   string `json:"kind"`
	Actor  string `json:"actor,omitempty"`
	Action string `json:"action"`
	Target string `json:"target,omitempty"`
	Result string `json:"result,omitempty"`
	// Detail is a JSON object, as a string (hashed as it is).
	Detail string `json:"detail,omitempty"`
	// Sealed is the payload above sealed under the tenant's key ("<commitment>.<ciphertext>"), which the
	// hash covers; "-" where it was discarded. Without the key (revoked) the payload fields are empty.
	Sealed string `json:"sealed,omitempty"`
	// Salt, with the payload shown, gives the commitment (SHA-256 of the salt, then the payload).
	Salt string `json:"salt,omitempty"`
	Prev string `json:"prev"`
	Hash string `json:"hash"`
}

// LogRetention is how long the tenant's logs (its audit log and its sandboxes' flow logs) are kept: the
// body of PUT /v1/log-retention (Seconds only) and the answer of GET and PUT.
type LogRetention struct {
	// Seconds is the tenant's own setting; 0 takes the server's default.
	Seconds int64 `json:"seconds"`
	// EffectiveSeconds is what applies; 0 is forever. Answers only.
	EffectiveSeconds int64 `json:"effective_seconds"`
	// MinSeconds is the shortest retention this server lets a tenant set. Answers only.
	MinSeconds int64 `json:"min_seconds"`
}

// Templates.

// Template is a root filesystem sandboxes boot from: the built-in default, or one made from an OCI
// image. A sandbox or session created from a template records Ref, the image's digest, so
// re-pointing or removing the name never changes what it, its snapshots and forks boot.
type Template struct {
	Name string `json:"name"`
	// Ref is what a sandbox created from the template now records: NAME@sha256:… ("default" for the
	// built-in one). It can be given as a template to boot exactly that image.
	Ref string `json:"ref"`
	// Digest is the image's manifest digest; empty for the built-in template.
	Digest string `json:"digest,omitempty"`
	// Builtin marks the default template.
	Builtin bool `json:"builtin"`
	// Env, WorkingDir, User, Entrypoint and Cmd are what the image sets for its processes.
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"working_dir,omitempty"`
	User       string   `json:"user,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	Layers     int      `json:"layers,omitempty"`
	// Labels are the image's labels.
	Labels map[string]string `json:"labels,omitempty"`
	// Start is the template's start command, if it has one: every sandbox of it has the command running
	// when it is handed over.
	Start *TemplateStart `json:"start,omitempty"`
	// Runtimes are the runtimes its sandboxes may run on, set by the operator: the first is their
	// default, and one alone forces it ("vm" is every VM runtime). Empty: every one.
	Runtimes  []string   `json:"runtimes,omitempty"`
	CreatedAt *time.Time `json:"created_at,omitempty"`
	UpdatedAt *time.Time `json:"updated_at,omitempty"`
}

// TemplateStart is a template's start command and ready check (argv), and whether a start snapshot
// of it is kept (sandboxes are then restored with the command running, not booted).
type TemplateStart struct {
	Cmd      []string `json:"cmd"`
	ReadyCmd []string `json:"ready_cmd,omitempty"`
	Snapshot bool     `json:"snapshot"`
}

// TemplateList is a page of templates (all of them: there are few).
type TemplateList struct {
	Templates []Template `json:"templates"`
}

// PullTemplateRequest names an image in a registry and how to reach it.
type PullTemplateRequest struct {
	// Image is registry/repository[:tag|@digest]; of a multi-platform image, linux/amd64 is taken.
	Image string `json:"image"`
	// Insecure allows a registry that speaks plain HTTP, or TLS with a certificate the server does
	// not trust. Without it, only trusted HTTPS is spoken, on loopback and private addresses too.
	Insecure bool `json:"insecure,omitempty"`
	// Username and PasswordSecret, the name of one of the operator's secrets holding the password or
	// token, are the registry's credentials.
	Username       string `json:"username,omitempty"`
	PasswordSecret string `json:"password_secret,omitempty"`
}

// TemplateUsers is what still uses a template's image.
type TemplateUsers struct {
	// Names are the template names that point at it.
	Names []string `json:"names,omitempty"`
	// Sandboxes and Sessions are IDs of those that recorded it (at most 20 each); the counts are whole.
	Sandboxes    []string `json:"sandboxes,omitempty"`
	Sessions     []string `json:"sessions,omitempty"`
	SandboxCount int      `json:"sandbox_count"`
	SessionCount int      `json:"session_count"`
}

// TemplateRemoval is what removing a template's name did: the image it pointed at stays on the nodes
// while Users is not empty, and goes after that.
type TemplateRemoval struct {
	Name   string        `json:"name"`
	Digest string        `json:"digest"`
	Users  TemplateUsers `json:"users"`
}

// TemplateRuntimesRequest sets the runtimes a template's sandboxes may run on.
type TemplateRuntimesRequest struct {
	// Runtimes, in order of preference (the first is the default; one alone forces it): runtime names
	// ("gvisor", "runc", "vm:qemu", …) or "vm" for every VM runtime. Empty allows every runtime again.
	Runtimes []string `json:"runtimes"`
}

// BuildEvent is one line of a build's progress: a step beginning (Image empty), a piece of a RUN
// step's output (Output), or a step done (Image set; Cached if it came from the cache).
type BuildEvent struct {
	Step        int    `json:"step,omitempty"`
	Steps       int    `json:"steps,omitempty"`
	Instruction string `json:"instruction,omitempty"`
	Output      string `json:"output,omitempty"`
	Cached      bool   `json:"cached,omitempty"`
	Image       string `json:"image,omitempty"`
}

// BuildLine is one line of a build's NDJSON response (POST /v1/templates/{name}/build): an event, or at
// the end the template or the error.
type BuildLine struct {
	BuildEvent
	Template *Template    `json:"template,omitempty"`
	Error    *ErrorDetail `json:"error,omitempty"`
}

// The cluster: join tokens and nodes.

// JoinToken is a token with which nodes join the cluster (operator tenant only). Its secret is shown
// once, when it is created. It joins each node once and at most Uses nodes; NodeIDs or NodePrefix, if
// set, are the IDs they may join as; Joined are those that did. Only a token made to Replace (for one
// node ID) takes the place of a node that joined before.
type JoinToken struct {
	ID          string    `json:"id"`
	Description string    `json:"description,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	ExpiresAt   time.Time `json:"expires_at"`
	NodeIDs     []string  `json:"node_ids,omitempty"`
	NodePrefix  string    `json:"node_prefix,omitempty"`
	Uses        int       `json:"uses"`
	Joined      []string  `json:"joined"`
	Replace     bool      `json:"replace,omitempty"`
}

// CreateJoinTokenRequest asks for a join token good for TTLSeconds (default one day, at most 30 days),
// for Uses nodes (default: one, or one for each of NodeIDs). A token for more than one node must name
// the NodeIDs or a NodePrefix they may join as. Replace (with exactly one NodeIDs) approves a new host
// for a node that joined before: the token takes that node's place.
type CreateJoinTokenRequest struct {
	TTLSeconds  int64    `json:"ttl_seconds,omitempty"`
	Description string   `json:"description,omitempty"`
	NodeIDs     []string `json:"node_ids,omitempty"`
	NodePrefix  string   `json:"node_prefix,omitempty"`
	Uses        int      `json:"uses,omitempty"`
	Replace     bool     `json:"replace,omitempty"`
}

// CreatedJoinToken is a new join token and its secret form, given to nodes ("alj_…"), with the
// fingerprint of the cluster CA's certificate ("sha256:<hex>") for them to pin.
type CreatedJoinToken struct {
	JoinToken
	Token         string `json:"token"`
	CAFingerprint string `json:"ca_fingerprint"`
}

// JoinTokenList is a list of join tokens.
type JoinTokenList struct {
	JoinTokens []JoinToken `json:"join_tokens"`
}

// Node is a node that joined the cluster. State is "up" (heard from lately: sandboxes are placed on
// it), "down" (not heard from for 12 seconds), or "new" (never reported); the fields after it come from
// its latest heartbeat.
type Node struct {
	ID              string     `json:"id"`
	Hosts           []string   `json:"hosts"`
	JoinedAt        time.Time  `json:"joined_at"`
	JoinToken       string     `json:"join_token"`
	CertExpiresAt   time.Time  `json:"cert_expires_at"`
	CertFingerprint string     `json:"cert_fingerprint"`
	State           string     `json:"state"`
	Addr            string     `json:"addr,omitempty"`
	LastSeenAt      *time.Time `json:"last_seen_at,omitempty"`
	// Sandboxes is how many of the Store's sandboxes are on it (creating, running or stopping), now;
	// ReportedSandboxes how many it said it runs in its latest heartbeat.
	Sandboxes         int           `json:"sandboxes"`
	ReportedSandboxes int           `json:"reported_sandboxes,omitempty"`
	Version           string        `json:"version,omitempty"`
	Capacity          *NodeCapacity `json:"capacity,omitempty"`
	// Reported is the capacity the node reported; Capacity is that cut to Bound, the most the node is
	// trusted to offer.
	Reported *NodeCapacity `json:"reported,omitempty"`
	Bound    *NodeCapacity `json:"bound,omitempty"`
	// Host names the machine it runs on (a hash; nodes on one machine have the same), from its latest
	// heartbeat.
	Host string `json:"host,omitempty"`
	// Warnings are what the operator should know of it: other nodes on its host that, with it, offer
	// more of the host than it has.
	Warnings []string `json:"warnings,omitempty"`
	// Draining says no sandbox is placed on it any more (DrainNode); its State is "draining" while it
	// is up.
	Draining bool `json:"draining,omitempty"`
	// Runtimes are the runtimes it has, from its latest heartbeat, its default first.
	Runtimes []NodeRuntime `json:"runtimes,omitempty"`
}

// NodeRuntime is a runtime a node has.
type NodeRuntime struct {
	Name string `json:"name"`
	// Abilities are what its sandboxes can do beyond running (memory_snapshots, files_snapshots, fork).
	Abilities []string `json:"abilities"`
	// Accel, for a VM runtime, says how its guests run: "kvm" (hardware virtualisation) or "tcg"
	// (emulated).
	Accel string `json:"accel,omitempty"`
}

// DrainReport is the response of POST /v1/nodes/{id}/drain: the node, now draining, and what was moved.
type DrainReport struct {
	Node Node `json:"node"`
	// Moved are the sessions that now run on another node (To); NotMoved those that could not be (paused
	// if their pause went through, else still running there), with Reason.
	Moved    []MovedSession `json:"moved"`
	NotMoved []MovedSession `json:"not_moved"`
	// Sandboxes are the node's sandboxes of no session: they cannot move and run until they end or are
	// deleted.
	Sandboxes []string `json:"sandboxes"`
}

// MovedSession is a session a drain moved, or could not.
type MovedSession struct {
	TenantID  string `json:"tenant_id"`
	SessionID string `json:"session_id"`
	To        string `json:"to,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// NodeCapacity is what a node offers sandboxes: CPUs (1000 a core) and memory, over-committed, and a
// bound of sandboxes.
type NodeCapacity struct {
	CPUMillicores int64 `json:"cpu_millicores"`
	MemoryMB      int64 `json:"memory_mb"`
	MaxSandboxes  int   `json:"max_sandboxes"`
}

// NodeList is a list of nodes.
type NodeList struct {
	Nodes []Node `json:"nodes"`
}

// JoinRequest is a node asking to join: its join token, its ID, a PEM certificate signing request for
// its key, and the names and addresses control planes reach it at. A node that joined before re-joins
// with Proof (and needs no token); Replace takes the place of a node that joined before with a join
// token made to replace it.
type JoinRequest struct {
	Token   string     `json:"token,omitempty"`
	NodeID  string     `json:"node_id"`
	CSR     string     `json:"csr"`
	Hosts   []string   `json:"hosts"`
	Proof   *JoinProof `json:"proof,omitempty"`
	Replace bool       `json:"replace,omitempty"`
}

// JoinProof proves that a node re-joining holds the key of the certificate it was last given: Signature
// is that key's ECDSA signature (ASN.1) over the request and SignedAt (Unix seconds), as the airlock CLI
// makes it (node join).
type JoinProof struct {
	Certificate string `json:"certificate"`
	SignedAt    int64  `json:"signed_at"`
	Signature   []byte `json:"signature"`
}

// JoinResponse is the node's certificate and the cluster CA's, both PEM.
type JoinResponse struct {
	Node          Node   `json:"node"`
	Certificate   string `json:"certificate"`
	CACertificate string `json:"ca_certificate"`
}

// Ports.

// Port is a TCP port a process in a sandbox listens on (GET /v1/sandboxes/{id}/ports).
type Port struct {
	Port int `json:"port"`
	// Address is the address the server is bound to: 0.0.0.0 or :: for every address.
	Address string `json:"address"`
	// Reachable is false for a server bound to loopback only, which the ingress cannot reach: it must
	// listen on 0.0.0.0 (or ::).
	Reachable bool `json:"reachable"`
	// Public ports need no credential (the network policy's public_ports).
	Public bool `json:"public"`
	// URLs reach the port through the ingress, with a credential in the Authorization header (or a port
	// URL's token).
	URLs *PortURLs `json:"urls,omitempty"`
}

// PortList is the response of GET /v1/sandboxes/{id}/ports.
type PortList struct {
	Ports []Port `json:"ports"`
}

// The code interpreter: stateful code contexts (Jupyter kernels) in a sandbox or session of a
// code-interpreter template, and the NDJSON events of a run.

// CodeContext is one code context of a sandbox.
type CodeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// CreateCodeContextRequest is the body of POST …/code/contexts.
type CreateCodeContextRequest struct {
	// Language is the context's language: "python" (the default).
	Language string `json:"language,omitempty"`
	// Cwd is its working directory (default /home/user).
	Cwd string `json:"cwd,omitempty"`
}

// RunCodeRequest is the body of POST …/code/run.
type RunCodeRequest struct {
	Code string `json:"code"`
	// ContextID is the context to run in; with neither it nor Language, the sandbox's default context.
	ContextID string `json:"context_id,omitempty"`
	// Language picks the default context of a language ("python").
	Language string `json:"language,omitempty"`
	// Env holds environment variables for this run only.
	Env map[string]string `json:"env,omitempty"`
	// TimeoutSeconds bounds the run (default 300, at most 3600); past it the run is interrupted and
	// its output ends with a TimeoutError.
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
}

// Types of CodeEvent.
const (
	CodeEventStdout      = "stdout"
	CodeEventStderr      = "stderr"
	CodeEventResult      = "result"
	CodeEventError       = "error"
	CodeEventCount       = "number_of_executions"
	CodeEventEnd         = "end_of_execution"
	CodeErrorTimeout     = "TimeoutError"
	CodeErrorInterpreter = "InterpreterError"
)

// CodeEvent is one line of a run's output (application/x-ndjson): stdout and stderr text as it comes,
// results (the last expression's value, is_main_result, and what the code displayed: charts, tables),
// an error, the execution count, and last end_of_execution.
type CodeEvent struct {
	Type string `json:"type"`
	// Text is the output of stdout and stderr, and a result's text/plain.
	Text string `json:"text,omitempty"`
	// ExecutionCount is the context's count of runs (number_of_executions).
	ExecutionCount int `json:"execution_count,omitempty"`
	CodeResult
	CodeError
}

// CodeResult is a value the code produced: each of its representations that it has.
type CodeResult struct {
	IsMainResult bool   `json:"is_main_result,omitempty"`
	HTML         string `json:"html,omitempty"`
	Markdown     string `json:"markdown,omitempty"`
	SVG          string `json:"svg,omitempty"`
	// PNG and JPEG are base64-encoded images (matplotlib's charts are PNG).
	PNG        string          `json:"png,omitempty"`
	JPEG       string          `json:"jpeg,omitempty"`
	PDF        string          `json:"pdf,omitempty"`
	LaTeX      string          `json:"latex,omitempty"`
	JSON       json.RawMessage `json:"json,omitempty"`
	JavaScript string          `json:"javascript,omitempty"`
	// Extra holds representations of other MIME types, by type.
	Extra map[string]json.RawMessage `json:"extra,omitempty"`
}

// CodeError is an exception the code raised (or TimeoutError, InterpreterError).
type CodeError struct {
	Name      string `json:"name,omitempty"`
	Value     string `json:"value,omitempty"`
	Traceback string `json:"traceback,omitempty"`
}

// CodeContextList is the body of GET …/code/contexts.
type CodeContextList struct {
	Contexts []CodeContext `json:"contexts"`
}

// The time machine: retention, restores, timelines and diffs of a session's snapshots.

// Retention says how long a session's snapshots are kept, by age: every snapshot younger than
// KeepAllSeconds, then the newest of each hour younger than KeepHourlySeconds, then the newest of each
// day younger than KeepDailySeconds. Zero fields inherit the tenant's (by default: 1 hour, 24 hours, 7
// days). Pinned snapshots, a session's head and a fork's source are always kept.
type Retention struct {
	KeepAllSeconds    int64 `json:"keep_all_seconds,omitempty"`
	KeepHourlySeconds int64 `json:"keep_hourly_seconds,omitempty"`
	KeepDailySeconds  int64 `json:"keep_daily_seconds,omitempty"`
}

// RestoreSessionRequest is the body of POST /v1/sessions/{id}/restore: one of SnapshotID, or At (the
// last snapshot taken at or before that time).
type RestoreSessionRequest struct {
	SnapshotID string     `json:"snapshot_id,omitempty"`
	At         *time.Time `json:"at,omitempty"`
}

// Timeline is the response of GET /v1/sessions/{id}/timeline: the session's snapshots, oldest first,
// forming a tree by ParentID (restores and forks branch it), and the one it runs from or would resume.
type Timeline struct {
	HeadSnapshotID string     `json:"head_snapshot_id,omitempty"`
	Snapshots      []Snapshot `json:"snapshots"`
}

// UpdateSnapshotRequest is the body of PATCH /v1/sessions/{id}/snapshots/{snapshot}.
type UpdateSnapshotRequest struct {
	// Pinned keeps the snapshot whatever the retention says, until unpinned.
	Pinned *bool `json:"pinned,omitempty"`
	// Name renames it ("" removes the name); nil leaves it.
	Name *string `json:"name,omitempty"`
}

// FileChange is one path that differs between two snapshots.
type FileChange struct {
	Path string `json:"path"`
	// Kind is "added", "removed" or "changed"; Type the path's type where it is ("file", "dir",
	// "symlink", "other").
	Kind    string `json:"kind"`
	Type    string `json:"type"`
	OldSize int64  `json:"old_size"`
	NewSize int64  `json:"new_size"`
}

// SnapshotDiff is the response of GET /v1/sessions/{id}/diff: the changes from one snapshot to
// another, or, asked for one path, its unified diff (Binary when either side is not text).
type SnapshotDiff struct {
	From      string       `json:"from"`
	To        string       `json:"to"`
	Changes   []FileChange `json:"changes,omitempty"`
	Truncated bool         `json:"truncated,omitempty"`
	Path      string       `json:"path,omitempty"`
	Unified   string       `json:"unified,omitempty"`
	Binary    bool         `json:"binary,omitempty"`
}

// RetentionSettings is the response of GET and PUT /v1/retention: the tenant's own override (zero
// fields inherit the server's defaults) and the policy sessions without one of their own get.
type RetentionSettings struct {
	Tenant    Retention `json:"tenant"`
	Effective Retention `json:"effective"`
}
