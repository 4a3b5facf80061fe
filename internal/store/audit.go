package store

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
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
	// Sealed, if not "", holds the entry's payload (Actor, Action, Target, Result and Detail) sealed under
	// the tenant's key, and those fields are "" in the Store: "<commitment>.<ciphertext>" (see
	// SealAudit). The hash chain covers Sealed, and so the commitment, which binds the payload: the log
	// verifies without the key, and with it the payload is shown and checked. AuditDiscarded marks an
	// entry whose payload was dropped because the tenant's key was unavailable.
	Sealed string
	// Salt is set (hex) on a sealed entry whose payload was opened: with the payload it gives the
	// commitment. It is never stored.
	Salt string
	Prev string // hex SHA-256 of the previous entry; "" for the first
	Hash string // hex SHA-256 of this entry (see AuditHash)
}

// HasPayload reports whether any of the entry's payload fields (Actor, Action, Target, Result, Detail)
// is set in the clear.
func (e AuditEntry) HasPayload() bool {
	return e.Actor != "" || e.Action != "" || e.Target != "" || e.Result != "" || e.Detail != ""
}

// AuditDiscarded is the Sealed value of an entry whose payload could not be sealed (the tenant's key
// was revoked or unavailable) and was dropped: only its time and kind are kept.
const AuditDiscarded = "-"

// auditSaltSize is the size of a sealed payload's salt: enough that its commitment says nothing of a
// payload that can be guessed.
const auditSaltSize = 16

// AuditPlaintext returns what a sealer seals of e (a fresh random salt, then the payload fields as a
// JSON array) and the payload's commitment, hex SHA-256 of the same bytes.
func AuditPlaintext(e AuditEntry) (plaintext []byte, commitment string, err error) {
	salt := make([]byte, auditSaltSize)
	if _, err := rand.Read(salt); err != nil {
		return nil, "", err
	}
	plaintext = append(salt, auditPayload(e)...)
	sum := sha256.Sum256(plaintext)
	return plaintext, hex.EncodeToString(sum[:]), nil
}

func auditPayload(e AuditEntry) []byte {
	b, _ := json.Marshal([]string{e.Actor, e.Action, e.Target, e.Result, e.Detail})
	return b
}

// SealedAudit returns e.Sealed made of a commitment and a ciphertext.
func SealedAudit(commitment string, ciphertext []byte) string {
	return commitment + "." + base64.RawStdEncoding.EncodeToString(ciphertext)
}

// AuditCiphertext returns the ciphertext of a sealed entry.
func AuditCiphertext(e AuditEntry) ([]byte, error) {
	_, ct, ok := strings.Cut(e.Sealed, ".")
	b, err := base64.RawStdEncoding.DecodeString(ct)
	if !ok || err != nil {
		return nil, fmt.Errorf("audit entry %d: malformed sealed payload: %w", e.Seq, errdefs.ErrInvalidArgument)
	}
	return b, nil
}

// OpenedAudit returns e with the payload of plaintext (from AuditPlaintext, opened) set, and its salt;
// plaintext must match e's commitment.
func OpenedAudit(e AuditEntry, plaintext []byte) (AuditEntry, error) {
	commitment, _, _ := strings.Cut(e.Sealed, ".")
	sum := sha256.Sum256(plaintext)
	var f []string
	if len(plaintext) < auditSaltSize || hex.EncodeToString(sum[:]) != commitment || json.Unmarshal(plaintext[auditSaltSize:], &f) != nil || len(f) != 5 {
		return e, fmt.Errorf("audit entry %d: the sealed payload does not match its commitment: %w", e.Seq, errdefs.ErrInvalidArgument)
	}
	e.Actor, e.Action, e.Target, e.Result, e.Detail = f[0], f[1], f[2], f[3], f[4]
	e.Salt = hex.EncodeToString(plaintext[:auditSaltSize])
	return e, nil
}

// auditCommitted reports whether an opened sealed entry's payload and salt give its commitment.
func auditCommitted(e AuditEntry) bool {
	salt, err := hex.DecodeString(e.Salt)
	if err != nil || len(salt) != auditSaltSize {
		return false
	}
	commitment, _, _ := strings.Cut(e.Sealed, ".")
	sum := sha256.Sum256(append(salt, auditPayload(e)...))
	return hex.EncodeToString(sum[:]) == commitment
}

// AuditAAD is what a sealed payload is bound to: the entry's tenant, kind and time, so that a payload
// moved to another entry does not open.
func AuditAAD(e AuditEntry) []byte {
	b, _ := json.Marshal([]any{"airlock-audit-v2", e.TenantID, e.Kind, NormalizeTime(e.Time).UnixMicro()})
	return b
}

// Audit entry kinds.
const (
	AuditAPI    = "api"
	AuditDaemon = "daemon"
	AuditEgress = "egress"
	// AuditLog entries are about the log itself: AuditPrune records a retention cut.
	AuditLog = "audit"
)

// AuditPrune is the Action of the entry PruneAudit appends: its Detail (AuditPruned, as JSON) names the
// last entry cut, so that the chain verifies from the log's new first entry. It is never sealed: it
// holds no tenant data, and it must verify without the tenant's key.
const AuditPrune = "prune"

// AuditPruned is the Detail of an AuditPrune entry.
type AuditPruned struct {
	// ThroughSeq and ThroughHash are the Seq and Hash of the last entry deleted: the new first entry
	// follows it.
	ThroughSeq  int64  `json:"through_seq"`
	ThroughHash string `json:"through_hash"`
	// Before is the cut's time: the entries deleted were older.
	Before time.Time `json:"before"`
}

// PruneEntry returns the entry (Seq, Prev and Hash unset) recording a cut of tenantID's log through
// entry last, of the entries older than before.
func PruneEntry(tenantID string, last AuditEntry, before, now time.Time) AuditEntry {
	d, _ := json.Marshal(AuditPruned{ThroughSeq: last.Seq, ThroughHash: last.Hash, Before: NormalizeTime(before)})
	return AuditEntry{TenantID: tenantID, Time: now, Kind: AuditLog, Actor: "retention", Action: AuditPrune,
		Target: "audit log", Result: "ok", Detail: string(d)}
}

// pruneOf returns what a prune entry says it cut, if e is one.
func pruneOf(e AuditEntry) (AuditPruned, bool) {
	var p AuditPruned
	if e.Kind != AuditLog || e.Action != AuditPrune || e.Sealed != "" || json.Unmarshal([]byte(e.Detail), &p) != nil {
		return AuditPruned{}, false
	}
	return p, true
}

// Validate returns an error wrapping errdefs.ErrInvalidArgument naming the first bad field of an entry
// to append (Seq, Prev and Hash are assigned).
func (e AuditEntry) Validate() error {
	switch {
	case e.TenantID == "":
		return fmt.Errorf("audit entry: tenant ID is required: %w", errdefs.ErrInvalidArgument)
	case e.Kind != AuditAPI && e.Kind != AuditDaemon && e.Kind != AuditEgress && e.Kind != AuditLog:
		return fmt.Errorf("audit entry: kind %q is not api, daemon, egress or audit: %w", e.Kind, errdefs.ErrInvalidArgument)
	case e.Sealed != "" && e.HasPayload():
		return fmt.Errorf("audit entry: a sealed entry keeps no payload in the clear: %w", errdefs.ErrInvalidArgument)
	case e.Salt != "":
		return fmt.Errorf("audit entry: a sealed payload's salt is never stored: %w", errdefs.ErrInvalidArgument)
	case e.Sealed == "" && e.Action == "":
		return fmt.Errorf("audit entry: action is required: %w", errdefs.ErrInvalidArgument)
	case e.Detail != "" && !json.Valid([]byte(e.Detail)):
		return fmt.Errorf("audit entry: detail is not JSON: %w", errdefs.ErrInvalidArgument)
	}
	return nil
}

// AuditHash is the hash an entry must carry: hex SHA-256 of the JSON array of its fields, Prev
// included, Hash left out. Times are in UTC with microseconds (NormalizeTime), RFC 3339. A sealed
// entry's array (version 2) has Sealed in place of the payload, which it seals: the chain verifies
// without the tenant's key.
func AuditHash(e AuditEntry) string {
	t := NormalizeTime(e.Time).Format(time.RFC3339Nano)
	b, _ := json.Marshal([]any{"airlock-audit-v1", e.TenantID, e.Seq, t, e.Kind, e.Actor, e.Action, e.Target, e.Result, e.Detail, e.Prev})
	if e.Sealed != "" {
		b, _ = json.Marshal([]any{"airlock-audit-v2", e.TenantID, e.Seq, t, e.Kind, e.Sealed, e.Prev})
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// VerifyAudit checks a tenant's entries, in order: each must follow the one before it (Seq one up,
// Prev its Hash) and carry its own hash; a sealed entry shown opened (with its Salt) must show the
// payload it committed to. The first entry must be the log's first (Seq 1, no Prev), or follow the
// last entry a retention cut deleted, as a later AuditPrune entry of entries records it, unless
// fromMiddle is set, when its Seq and Prev are taken as given. It returns the index in entries of the
// first entry that does not hold, or -1 if all do, and why.
func VerifyAudit(entries []AuditEntry, fromMiddle bool) (int, string) {
	prev, seq := "", int64(0)
	if len(entries) > 0 && (entries[0].Seq != 1 || entries[0].Prev != "") && (fromMiddle || prunedBefore(entries)) {
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
		case e.Sealed != "" && e.Salt == "" && e.HasPayload(),
			e.Sealed != "" && e.Salt != "" && !auditCommitted(e):
			// Sealed: it shows nothing, or (opened) what it sealed.
			return i, "its hash does not match its content (the payload shown is not the one sealed)"
		}
		prev, seq = e.Hash, e.Seq
	}
	return -1, ""
}

// prunedBefore reports whether an AuditPrune entry among entries says a retention cut deleted the
// entries before the first (its last deleted entry is the one the first follows). The prune entry is
// itself in the chain VerifyAudit checks.
func prunedBefore(entries []AuditEntry) bool {
	first := entries[0]
	for _, e := range entries {
		if p, ok := pruneOf(e); ok && p.ThroughSeq == first.Seq-1 && p.ThroughHash == first.Prev {
			return true
		}
	}
	return false
}
