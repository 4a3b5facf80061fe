// Package snapshot is the encrypted, deduplicating store of snapshots: named sets of files (a gVisor
// checkpoint image, a file-system tarball…) written once, read back later, shared chunk by chunk with
// every other snapshot of the same tenant. Sessions (pause, resume, fork) and the time machine
// (rolling snapshots, retention, GC) keep their images here.
//
// # Layout
//
// Everything lives in a blob.Store, under one prefix per tenant:
//
//	tenants/<tenant>/datakey               the tenant's data key, wrapped by its KeyProvider (JSON)
//	tenants/<tenant>/chunks/<id[:2]>/<id>  one encrypted chunk of file content
//	tenants/<tenant>/snapshots/<snapshot>  one encrypted manifest
//
// A file is cut into chunks by content-defined chunking (restic's Rabin-fingerprint chunker with the
// fixed polynomial Polynomial; chunks of MinChunkSize..MaxChunkSize bytes, about AvgChunkSize on
// average), so that an insertion or change moves only the chunk boundaries near it. A chunk is named by
// its ID, the hex HMAC-SHA256 of its plaintext under the tenant's ID key: equal content has one ID
// within a tenant and is stored once (deduplication), and an ID reveals nothing of the content to anyone
// without the key. A writer Stats a chunk's blob before uploading it and skips it if it exists.
//
// A manifest lists a snapshot's files and, for each, its chunks' IDs and sizes in order, plus
// caller-given metadata and the write's statistics. It is written last, once every chunk is stored,
// and only if no manifest of that ID exists: a snapshot exists exactly when its manifest does, and a
// writer that dies leaves only unreferenced chunks, which GC collects.
//
// # Cryptography
//
// Each tenant has one random 256-bit data key (keys.NewDataKey), stored only wrapped by the tenant's
// key-encryption key in the keys.KeyProvider (envelope encryption). A revoked tenant key makes every
// write and read fail with errdefs.ErrPermissionDenied. The data key is unwrapped once per operation
// (a Writer's life, one read, one List or GC) and never stored; from it HKDF-SHA256 derives three
// subkeys, bound to the tenant ID:
//
//   - the chunk key, AES-256-GCM, encrypting chunks;
//   - the ID key, HMAC-SHA256, naming chunks;
//   - the manifest key, AES-256-GCM, encrypting manifests.
//
// A chunk blob is a 2-byte header (format version, flags), a random 96-bit nonce and the GCM
// ciphertext of the chunk, zstd-compressed unless compression does not shrink it (a flag says which).
// The GCM additional data binds the ciphertext to the format version, the flags, the tenant ID and the
// chunk ID, so a chunk moved to another ID or tenant does not decrypt. A reader also recomputes the ID
// from the decrypted plaintext and checks its size against the manifest. Manifests are sealed the same
// way under the manifest key, bound to the tenant and snapshot IDs. Any failed check — a missing chunk,
// a chunk or manifest that does not authenticate, a wrong size or ID — is an error wrapping ErrCorrupt
// that names the snapshot, file and chunk; a read never returns a silent partial result.
//
// Random nonces under one key bound a tenant to about 2³² chunk writes (2 PiB at the minimum chunk
// size) before the GCM nonce-collision risk reaches 2⁻³²; the manifest key has its own budget.
//
// What the blob store's operator can see: the number, sizes and times of chunks and manifests, and
// which snapshots share chunks. Because the chunker polynomial is fixed rather than secret, chunk
// boundaries depend only on content, so someone who can read the blob store and guesses a tenant's
// exact file content could confirm the guess from the sequence of chunk sizes.
//
// # Garbage collection
//
// Delete removes a manifest only. GC marks every chunk a manifest references and deletes the others
// that are older than a grace period. Chunks of a snapshot still being written are unreferenced until
// its Commit, so writers must finish within the grace period; in this process the Store also keeps a
// registry of the chunks its open Writers use and GC never deletes those. GC deletes nothing but
// unreferenced chunks, so a crash at any point leaves every committed snapshot readable.
//
// GC coordinates with Writers of the same Store only. A Writer of another process (or another Store)
// that reuses an old unreferenced chunk while GC runs may lose it; run GC where the tenant's snapshots
// are written.
package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/blob"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/keys"
)

// Config configures a Store.
type Config struct {
	// Blobs keeps the wrapped data keys, the chunks and the manifests. Required. If it implements
	// blob.Creator, manifests and data keys are created atomically even against other processes;
	// otherwise only against writers of this Store.
	Blobs blob.Store
	// Keys wraps and unwraps the tenants' data keys. Nil: a store that writes and reads only with
	// Grants another store made (a node's), on which every call that needs the provider fails with
	// ErrFailedPrecondition.
	Keys keys.KeyProvider
	// Now is the clock for creation times and GC's grace period; nil means time.Now.
	Now func() time.Time
	// Logger receives debug records of commits and GC runs; nil discards them.
	Logger *slog.Logger
}

// Store writes, reads and collects snapshots. Safe for concurrent use. It keeps no data key in memory
// between operations.
type Store struct {
	blobs  blob.Store
	keys   keys.KeyProvider
	now    func() time.Time
	log    *slog.Logger
	holds  holds
	create chan struct{} // a one-slot lock serializing the creation of data keys
}

// New returns a Store for cfg.
func New(cfg Config) (*Store, error) {
	if cfg.Blobs == nil {
		return nil, fmt.Errorf("snapshot: Config.Blobs is required: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.Keys == nil {
		cfg.Keys = noProvider{}
	}
	s := &Store{blobs: cfg.Blobs, keys: cfg.Keys, now: cfg.Now, log: cfg.Logger, create: make(chan struct{}, 1)}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s, nil
}

// LogValue prints nothing of the store's keys.
func (s *Store) LogValue() slog.Value { return slog.StringValue("snapshot.Store{keys: REDACTED}") }

// Format prints nothing of the store's keys, for every verb.
func (s *Store) Format(f fmt.State, _ rune) { fmt.Fprint(f, "snapshot.Store{keys: REDACTED}") }

// Manifest describes a committed snapshot.
type Manifest struct {
	// Version is the manifest format version (1).
	Version int `json:"version"`
	// Tenant and ID name the snapshot.
	Tenant string `json:"tenant"`
	ID     string `json:"id"`
	// CreatedAt is when the snapshot was committed (UTC).
	CreatedAt time.Time `json:"created_at"`
	// Meta is what the caller gave Writer.Commit.
	Meta map[string]string `json:"meta,omitempty"`
	// Files are the snapshot's files in the order they were added.
	Files []File `json:"files"`
	// Stats are the statistics of the write.
	Stats Stats `json:"stats"`
}

// File is one file of a snapshot.
type File struct {
	// Name is the file's slash-separated path relative to the snapshot (see ValidateFileName).
	Name string `json:"name"`
	// Size is the file's length in bytes, the sum of its chunks' sizes.
	Size int64 `json:"size"`
	// Chunks are the file's content in order; a chunk may occur more than once.
	Chunks []ChunkRef `json:"chunks"`
}

// ChunkRef is a reference to a chunk.
type ChunkRef struct {
	// ID is the chunk's ID: 64 hex digits of HMAC-SHA256 of its plaintext under the tenant's ID key.
	ID string `json:"id"`
	// Size is the plaintext's length in bytes.
	Size int64 `json:"size"`
}

// Stats are the statistics of one snapshot's write.
type Stats struct {
	// LogicalBytes is the total size of the snapshot's files.
	LogicalBytes int64 `json:"logical_bytes"`
	// Chunks is the number of chunk references of the snapshot's files.
	Chunks int `json:"chunks"`
	// NewChunks is the number of chunks this write uploaded.
	NewChunks int `json:"new_chunks"`
	// NewStoredBytes is the size of the blobs this write uploaded: what the snapshot added to the blob
	// store, besides its manifest.
	NewStoredBytes int64 `json:"new_stored_bytes"`
	// ReusedChunks is the number of chunk references (Chunks - NewChunks) served by a chunk already
	// stored, by an earlier snapshot or earlier in this one.
	ReusedChunks int `json:"reused_chunks"`
}

// ManifestInfo summarizes a snapshot for listings.
type ManifestInfo struct {
	// ID, CreatedAt, Meta and Stats are the manifest's.
	ID        string
	CreatedAt time.Time
	Meta      map[string]string
	Stats     Stats
	// Files is the number of files; Size their total size in bytes.
	Files int
	Size  int64
}

func (m *Manifest) info() ManifestInfo {
	return ManifestInfo{ID: m.ID, CreatedAt: m.CreatedAt, Meta: m.Meta, Files: len(m.Files), Size: m.Stats.LogicalBytes, Stats: m.Stats}
}

// ErrCorrupt is wrapped by every error that reports stored data missing or failing a check: a chunk
// or manifest that is gone, does not authenticate, or does not match what refers to it. It also
// matches errdefs.ErrInternal (errors.Is): it is damage, never the caller's fault.
var ErrCorrupt error = &sentinel{msg: "snapshot data corrupt", base: errdefs.ErrInternal}

type sentinel struct {
	msg  string
	base error
}

func (e *sentinel) Error() string { return e.msg }
func (e *sentinel) Unwrap() error { return e.base }

// CorruptError reports damaged snapshot data. It wraps ErrCorrupt.
type CorruptError struct {
	// Snapshot is the snapshot's ID.
	Snapshot string
	// File is the file being read; empty if the damage is not in a file's content.
	File string
	// Chunk is the damaged chunk's ID; empty if the damage is not in a chunk.
	Chunk string
	// Reason says what is wrong, e.g. "missing" or "does not authenticate (corrupted)".
	Reason string
}

// Error reads like "snapshot s1: file checkpoint/pages.img: chunk 3f2a…: missing".
func (e *CorruptError) Error() string {
	var b strings.Builder
	b.WriteString("snapshot ")
	b.WriteString(e.Snapshot)
	if e.File != "" {
		b.WriteString(": file ")
		b.WriteString(e.File)
	}
	if e.Chunk != "" {
		b.WriteString(": chunk ")
		b.WriteString(e.Chunk)
	}
	b.WriteString(": ")
	b.WriteString(e.Reason)
	return b.String()
}

// Unwrap returns ErrCorrupt.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

var (
	snapshotIDRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)
	tenantIDRE   = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$`)
)

// MaxFileNameSize bounds the length of a file name in bytes.
const MaxFileNameSize = 1024

// maxMetaSize bounds the total size of the keys and values of a manifest's Meta.
const maxMetaSize = 64 << 10

// ValidateSnapshotID reports ErrInvalidArgument unless id matches [A-Za-z0-9_-]{1,128}.
func ValidateSnapshotID(id string) error {
	if !snapshotIDRE.MatchString(id) {
		return fmt.Errorf("snapshot ID %q must match [A-Za-z0-9_-]{1,128}: %w", id, errdefs.ErrInvalidArgument)
	}
	return nil
}

// ValidateTenantID reports ErrInvalidArgument unless id is a tenant ID (keys.ValidateTenantID) that
// can also name the tenant's blob prefix: [A-Za-z0-9_-][A-Za-z0-9._-]{0,127}.
func ValidateTenantID(id string) error {
	if err := keys.ValidateTenantID(id); err != nil {
		return err
	}
	if !tenantIDRE.MatchString(id) {
		return fmt.Errorf("tenant ID %q must match [A-Za-z0-9_-][A-Za-z0-9._-]{0,127} to own snapshots: %w", id, errdefs.ErrInvalidArgument)
	}
	return nil
}

// ValidateFileName reports ErrInvalidArgument unless name is a clean relative slash path of
// 1..MaxFileNameSize bytes: no leading or trailing '/', no empty, "." or ".." element, no backslash
// and no control character ("checkpoint/pages.img", "fs/upper.tar").
func ValidateFileName(name string) error {
	if name == "" || len(name) > MaxFileNameSize || name == "." || !fs.ValidPath(name) {
		return fmt.Errorf("file name %q must be a clean relative slash path of 1..%d bytes: %w", name, MaxFileNameSize, errdefs.ErrInvalidArgument)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f || r == '\\' {
			return fmt.Errorf("file name %q has a control character or backslash: %w", name, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

func checkIDs(tenantID, snapshotID string) error {
	if err := ValidateTenantID(tenantID); err != nil {
		return err
	}
	return ValidateSnapshotID(snapshotID)
}

func checkMeta(meta map[string]string) error {
	n := 0
	for k, v := range meta {
		if k == "" {
			return fmt.Errorf("empty meta key: %w", errdefs.ErrInvalidArgument)
		}
		n += len(k) + len(v)
	}
	if n > maxMetaSize {
		return fmt.Errorf("meta is %d bytes, more than %d: %w", n, maxMetaSize, errdefs.ErrTooLarge)
	}
	return nil
}

// Blobs returns the blob store the snapshots are kept in (others share it under their own prefixes:
// template images under templates/, see oci.Store.Publish).
func (s *Store) Blobs() blob.Store { return s.blobs }

// Blob keys.

func tenantPrefix(tenantID string) string { return "tenants/" + tenantID + "/" }

func dataKeyKey(tenantID string) string { return tenantPrefix(tenantID) + "datakey" }

func chunksPrefix(tenantID string) string { return tenantPrefix(tenantID) + "chunks/" }

// IsChunkKey reports whether key names a chunk's blob: immutable once written (a cache may keep it).
func IsChunkKey(key string) bool {
	rest, ok := strings.CutPrefix(key, "tenants/")
	if !ok {
		return false
	}
	_, rest, ok = strings.Cut(rest, "/")
	return ok && strings.HasPrefix(rest, "chunks/")
}

func chunkKey(tenantID, id string) string { return chunksPrefix(tenantID) + id[:2] + "/" + id }

func manifestsPrefix(tenantID string) string { return tenantPrefix(tenantID) + "snapshots/" }

func manifestKey(tenantID, snapshotID string) string { return manifestsPrefix(tenantID) + snapshotID }

// createBlob stores data under key unless an object is there (ErrAlreadyExists), atomically if the
// blob store is a blob.Creator and otherwise with a Stat then a Put, which the caller must protect from
// concurrent writers of the same key.
func (s *Store) createBlob(ctx context.Context, key string, data []byte) error {
	if c, ok := s.blobs.(blob.Creator); ok {
		return c.Create(ctx, key, data)
	}
	_, err := s.blobs.Stat(ctx, key)
	if err == nil {
		return fmt.Errorf("blob %s: %w", key, errdefs.ErrAlreadyExists)
	}
	if !errors.Is(err, errdefs.ErrNotFound) {
		return err
	}
	return s.blobs.Put(ctx, key, data)
}

// noProvider is the key provider of a Store without one.
type noProvider struct{}

var errNoProvider = fmt.Errorf("this snapshot store has no key provider (a node's, which reads and writes with grants): %w", errdefs.ErrFailedPrecondition)

func (noProvider) WrapKey(context.Context, string, []byte) ([]byte, string, error) {
	return nil, "", errNoProvider
}

func (noProvider) UnwrapKey(context.Context, string, string, []byte) ([]byte, error) {
	return nil, errNoProvider
}
