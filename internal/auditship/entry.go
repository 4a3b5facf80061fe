// Package auditship ships a tenant's audit log (the JSON lines of GET /v1/audit) to a destination the
// tenant chooses: a file, a bucket of S3 or an S3-compatible service, or a syslog server (RFC 5424 over
// UDP, TCP or TLS). It runs on the tenant's side, in `airlock audit export --to`: the entries go from
// the API to the tenant's shipper and on to its destination, so the control plane never connects to an
// address a tenant names and no server-side sink holds a tenant's opened payloads.
//
// A Shipper reads the log from a Source (airlock.Client.ExportAudit), once or, with Follow, polling for
// new entries, and hands them in batches to a Sink. Delivery is at least once: after each batch a Sink
// took, the Shipper records the last entry in its state file, and a restart resumes after it; a crash
// between the two ships that batch again. Sinks that can tell what they already hold (a file, a
// bucket: Holder) let a restart skip it, so those get each entry once.
package auditship

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// Entry is one entry of the log, as the server sent it, with the fields a destination needs.
type Entry struct {
	// Line is the entry's JSON line as the server sent it, without the newline: what is shipped.
	Line []byte
	// Tenant, Seq, Time, Kind, Prev and Hash are read from Line.
	Tenant string
	Seq    int64
	Time   time.Time
	Kind   string
	Prev   string
	Hash   string
}

// ParseEntry reads the fields of an entry from its JSON line; line is kept, not copied.
func ParseEntry(line []byte) (Entry, error) {
	var f struct {
		Tenant string    `json:"tenant"`
		Seq    int64     `json:"seq"`
		Time   time.Time `json:"time"`
		Kind   string    `json:"kind"`
		Prev   string    `json:"prev"`
		Hash   string    `json:"hash"`
	}
	if err := json.Unmarshal(line, &f); err != nil {
		return Entry{}, fmt.Errorf("not an audit entry: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	if f.Seq < 1 || f.Hash == "" {
		return Entry{}, fmt.Errorf("not an audit entry: no sequence number or hash: %w", errdefs.ErrInvalidArgument)
	}
	return Entry{Line: line, Tenant: f.Tenant, Seq: f.Seq, Time: f.Time, Kind: f.Kind, Prev: f.Prev, Hash: f.Hash}, nil
}
