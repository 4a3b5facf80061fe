package store

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// Limits on list sizes.
const (
	DefaultListLimit = 50   // the page size when a limit is 0
	MaxListLimit     = 1000 // larger limits are lowered to this
)

// NewID returns prefix + "_" + 26 random lowercase base32 characters (128 bits from crypto/rand), e.g.
// NewID("sb") = "sb_4k2x…". Engines use it to fill in an empty ID.
func NewID(prefix string) string {
	return prefix + "_" + strings.ToLower(rand.Text())
}

// NormalizeLimit returns the page size to use for a requested limit: DefaultListLimit for 0, MaxListLimit
// for anything above it, and an error wrapping errdefs.ErrInvalidArgument for a negative limit.
func NormalizeLimit(limit int) (int, error) {
	switch {
	case limit < 0:
		return 0, fmt.Errorf("list limit %d: %w", limit, errdefs.ErrInvalidArgument)
	case limit == 0:
		return DefaultListLimit, nil
	case limit > MaxListLimit:
		return MaxListLimit, nil
	}
	return limit, nil
}

// SandboxFilter selects and pages the sandboxes ListSandboxes returns. The zero value lists the first
// DefaultListLimit sandboxes of every state.
type SandboxFilter struct {
	States   []SandboxState    // match any of these; empty matches every state
	Metadata map[string]string // every pair must be present with exactly this value; empty matches all
	Limit    int               // page size; see NormalizeLimit
	Cursor   string            // "" for the first page, else the cursor the previous page returned
}

// Validate checks f and returns an error wrapping errdefs.ErrInvalidArgument if a state is unknown, a
// metadata key is empty, the limit is negative or the cursor does not parse.
func (f SandboxFilter) Validate() error {
	for _, s := range f.States {
		if !s.Valid() {
			return fmt.Errorf("filter state %q: %w", s, errdefs.ErrInvalidArgument)
		}
	}
	for k := range f.Metadata {
		if k == "" {
			return fmt.Errorf("filter metadata key is empty: %w", errdefs.ErrInvalidArgument)
		}
	}
	if _, err := NormalizeLimit(f.Limit); err != nil {
		return err
	}
	if f.Cursor != "" {
		if _, err := ParseCursor(f.Cursor); err != nil {
			return err
		}
	}
	return nil
}

// Cursor is a position in the (CreatedAt, ID) order of ListSandboxes: the next page starts after it.
// On the wire it is opaque (see Encode); engines decode it with ParseCursor.
type Cursor struct {
	CreatedAt time.Time
	ID        string
}

const cursorVersion = "c1"

// Encode returns the opaque form of c that ListSandboxes hands out.
func (c Cursor) Encode() string {
	raw := cursorVersion + ":" + strconv.FormatInt(NormalizeTime(c.CreatedAt).UnixMicro(), 10) + ":" + c.ID
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

// ParseCursor decodes a cursor made by Cursor.Encode. Anything else is an error wrapping
// errdefs.ErrInvalidArgument.
func ParseCursor(s string) (Cursor, error) {
	bad := fmt.Errorf("list cursor %q: %w", s, errdefs.ErrInvalidArgument)
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return Cursor{}, bad
	}
	parts := strings.SplitN(string(raw), ":", 3)
	if len(parts) != 3 || parts[0] != cursorVersion || parts[2] == "" {
		return Cursor{}, bad
	}
	us, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return Cursor{}, bad
	}
	return Cursor{CreatedAt: time.UnixMicro(us).UTC(), ID: parts[2]}, nil
}

// Validate checks the fields of sb that every engine relies on, and returns an error wrapping
// errdefs.ErrInvalidArgument naming the first bad one: ID and TenantID must be set, State must be a
// valid state, Spec values must not be negative, metadata keys must not be empty and Version must not
// be negative. It does not judge state transitions (see CheckTransition).
func (sb Sandbox) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("sandbox %q: %s: %w", sb.ID, fmt.Sprintf(format, args...), errdefs.ErrInvalidArgument)
	}
	switch {
	case sb.ID == "":
		return bad("ID is empty")
	case sb.TenantID == "":
		return bad("tenant ID is empty")
	case !sb.State.Valid():
		return bad("unknown state %q", sb.State)
	case sb.Spec.CPUMillicores < 0, sb.Spec.MemoryMB < 0, sb.Spec.DiskMB < 0, sb.Spec.TimeoutSeconds < 0:
		return bad("negative resource in spec %+v", sb.Spec)
	case sb.Version < 0:
		return bad("negative version %d", sb.Version)
	}
	for k := range sb.Metadata {
		if k == "" {
			return bad("metadata key is empty")
		}
	}
	return nil
}
