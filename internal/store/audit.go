package store

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// AuditEntry is one entry of a tenant's audit log: an API call, a message on a sandbox's daemon
// channel, or an egress decision. The entries of a tenant form a hash chain: each carries the hash of
// the one before it (Prev) and its own (Hash), so a changed, removed or reordered entry shows.
type AuditEntry struct {
	TenantID string
	Seq      int64 // 1, 2, 3… per tenant, assigned by AppendAudit
	Time     time.Time
	Kind     string // "api", "daemon" or "egress"
	Actor    string // the API key or access token ID; the sandbox for daemon and egress entries
	Action   string // "POST /v1/sandboxes"; the daemon operation; the egress protocol
	Target   string // the object or destination acted on
	Result   string // the HTTP status; "ok" or the error code; "allow" or "deny"
	Detail   string // JSON (an object, by convention) with more, or ""
	Prev     string // hex SHA-256 of the previous entry; "" for the first
	Hash     string // hex SHA-256 of this entry (see AuditHash)
}

// Audit entry kinds.
const (
	AuditAPI    = "api"
	AuditDaemon = "daemon"
	AuditEgress = "egress"
)

// Validate returns an error wrapping errdefs.ErrInvalidArgument naming the first bad field of an entry
// to append (Seq, Prev and Hash are assigned).
func (e AuditEntry) Validate() error {
	switch {
	case e.TenantID == "":
		return fmt.Errorf("audit entry: tenant ID is required: %w", errdefs.ErrInvalidArgument)
	case e.Kind != AuditAPI && e.Kind != AuditDaemon && e.Kind != AuditEgress:
		return fmt.Errorf("audit entry: kind %q is not api, daemon or egress: %w", e.Kind, errdefs.ErrInvalidArgument)
	case e.Action == "":
		return fmt.Errorf("audit entry: action is required: %w", errdefs.ErrInvalidArgument)
	case e.Detail != "" && !json.Valid([]byte(e.Detail)):
		return fmt.Errorf("audit entry: detail is not JSON: %w", errdefs.ErrInvalidArgument)
	}
	return nil
}

// AuditHash is the hash an entry must carry: hex SHA-256 of the JSON array of its fields, Prev
// included, Hash left out. Times are in UTC with microseconds (NormalizeTime), RFC 3339.
func AuditHash(e AuditEntry) string {
	b, _ := json.Marshal([]any{"airlock-audit-v1", e.TenantID, e.Seq, NormalizeTime(e.Time).Format(time.RFC3339Nano),
		e.Kind, e.Actor, e.Action, e.Target, e.Result, e.Detail, e.Prev})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// VerifyAudit checks a tenant's entries, in order: each must follow the one before it (Seq one up,
// Prev its Hash) and carry its own hash. The first entry must be the log's first (Seq 1, no Prev)
// unless fromMiddle is set, when its Seq and Prev are taken as given. It returns the index in entries
// of the first entry that does not hold, or -1 if all do, and why.
func VerifyAudit(entries []AuditEntry, fromMiddle bool) (int, string) {
	prev, seq := "", int64(0)
	if fromMiddle && len(entries) > 0 {
		prev, seq = entries[0].Prev, entries[0].Seq-1
	}
	for i, e := range entries {
		switch {
		case e.Seq != seq+1:
			return i, fmt.Sprintf("sequence number %d follows %d", e.Seq, seq)
		case e.Prev != prev:
			return i, "it does not carry the previous entry's hash"
		case AuditHash(e) != e.Hash:
			return i, "its hash does not match its content"
		}
		prev, seq = e.Hash, e.Seq
	}
	return -1, ""
}
