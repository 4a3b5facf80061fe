package store

import (
	"fmt"
	"slices"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// Scope is what an API key may do within its tenant. Each scope includes the ones below it:
// admin ⊃ write ⊃ read.
type Scope string

// The scopes of API keys.
const (
	// ScopeRead reads: get and list, read files, follow a process's output.
	ScopeRead Scope = "read"
	// ScopeWrite also changes things: create, delete, exec, write files, pause, fork, hand out access
	// tokens.
	ScopeWrite Scope = "write"
	// ScopeAdmin also manages the tenant itself: its API keys, its encryption key, its audit log. An
	// admin key of the operator tenant also manages the other tenants.
	ScopeAdmin Scope = "admin"
)

// Valid reports whether s is one of the scopes.
func (s Scope) Valid() bool { return s == ScopeRead || s == ScopeWrite || s == ScopeAdmin }

// Allows reports whether a key of scope s may do what needs scope need.
func (s Scope) Allows(need Scope) bool { return s.rank() >= need.rank() && need.rank() > 0 }

func (s Scope) rank() int {
	switch s {
	case ScopeRead:
		return 1
	case ScopeWrite:
		return 2
	case ScopeAdmin:
		return 3
	}
	return 0
}

// TokenScope is one thing an access token may do on its sandbox or session.
type TokenScope string

// The scopes of access tokens.
const (
	// TokenExec runs processes and works with them: exec, streams, the process list, attach, signals.
	TokenExec TokenScope = "exec"
	// TokenFiles reads and writes files. It writes as root, so it can plant code that root or the
	// template's processes run: it is as strong as TokenExec.
	TokenFiles TokenScope = "files"
	// TokenPorts reaches the ports the sandbox listens on; running code through the code interpreter's
	// needs TokenExec as well.
	TokenPorts TokenScope = "ports"
)

// Valid reports whether s is one of the token scopes.
func (s TokenScope) Valid() bool { return s == TokenExec || s == TokenFiles || s == TokenPorts }

// AccessToken is a short-lived credential for the data plane of one sandbox or one session (exec,
// files, ports), made to be handed to an agent. Like an API key, the token itself is never stored: only
// Hash, which the auth layer looks tokens up by, and Prefix, to tell tokens apart.
type AccessToken struct {
	ID       string // "tok_" + random; see NewID
	TenantID string
	Name     string // the creator's label; may be empty
	// Exactly one of SandboxID and SessionID is set: the one object the token reaches.
	SandboxID string
	SessionID string
	Scopes    []TokenScope // at least one, no repeats, sorted
	// Port, if not 0, is the one port of the sandbox the token reaches with scope ports (a port URL's
	// token); 0 is every port.
	Port   int
	Prefix string
	Hash   []byte
	// CreatedBy is the ID of the API key that made the token.
	CreatedBy string
	CreatedAt time.Time
	ExpiresAt time.Time
	RevokedAt *time.Time // nil while the token is valid
}

// Allows reports whether the token grants scope s.
func (t AccessToken) Allows(s TokenScope) bool { return slices.Contains(t.Scopes, s) }

// AllowsPort reports whether the token reaches port with scope ports.
func (t AccessToken) AllowsPort(port int) bool {
	return t.Allows(TokenPorts) && (t.Port == 0 || t.Port == port)
}

// Validate returns an error wrapping errdefs.ErrInvalidArgument naming the first bad field of t.
func (t AccessToken) Validate() error {
	switch {
	case t.ID == "" || t.TenantID == "":
		return fmt.Errorf("access token %q: ID and tenant ID are required: %w", t.ID, errdefs.ErrInvalidArgument)
	case (t.SandboxID == "") == (t.SessionID == ""):
		return fmt.Errorf("access token %s: set exactly one of sandbox ID and session ID: %w", t.ID, errdefs.ErrInvalidArgument)
	case len(t.Hash) == 0:
		return fmt.Errorf("access token %s: hash is empty: %w", t.ID, errdefs.ErrInvalidArgument)
	case len(t.Scopes) == 0:
		return fmt.Errorf("access token %s: no scopes: %w", t.ID, errdefs.ErrInvalidArgument)
	case t.Port < 0 || t.Port > 65535:
		return fmt.Errorf("access token %s: port %d is not in 1..65535: %w", t.ID, t.Port, errdefs.ErrInvalidArgument)
	case !t.ExpiresAt.After(t.CreatedAt):
		return fmt.Errorf("access token %s: expires at %v, not after it is created: %w", t.ID, t.ExpiresAt, errdefs.ErrInvalidArgument)
	}
	for i, s := range t.Scopes {
		if !s.Valid() {
			return fmt.Errorf("access token %s: unknown scope %q: %w", t.ID, s, errdefs.ErrInvalidArgument)
		}
		if i > 0 && t.Scopes[i-1] >= s {
			return fmt.Errorf("access token %s: scopes must be sorted without repeats: %w", t.ID, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// TokenLimits bounds the live access tokens (neither revoked nor expired) that CreateAccessToken lets
// stand; a zero field is no bound.
type TokenLimits struct {
	// PerObject bounds the live tokens of one sandbox or session.
	PerObject int
	// PerTenant bounds the live tokens of one tenant.
	PerTenant int
}

// AccessTokenFilter selects access tokens: zero fields select all.
type AccessTokenFilter struct {
	SandboxID string
	SessionID string
}
