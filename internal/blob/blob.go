// Package blob defines Store, the object store Airlock keeps snapshot data in: a flat namespace of
// immutable-looking byte strings named by keys, small enough an interface to be backed by a local
// directory (blob/local) or by S3 or any S3-compatible service (blob/s3).
//
// Keys are 1..MaxKeySize bytes of [A-Za-z0-9._/-] made of segments separated by '/', each of
// 1..MaxSegmentSize bytes and none of them "." or ".."; a key does not start or end with '/'. "a" and
// "a/b" may both exist, as in S3.
//
// A Store keeps no secret and does not encrypt: callers (internal/snapshot) put only ciphertext in it.
//
// The conformance suite every implementation runs is blob/blobtest.
package blob

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// MaxKeySize is the longest key, in bytes, a Store accepts: S3's limit of 1024 less room for what a
// store adds to each key (blob/s3's prefix and suffix).
const MaxKeySize = 960

// MaxSegmentSize is the longest segment of a key, in bytes: it leaves room under the usual file-name
// limit of 255 bytes for the decorations a file-system store adds (blob/local's temporary files).
const MaxSegmentSize = 200

// Store is an object store. Implementations are safe for concurrent use.
//
// Every method fails with an error wrapping errdefs.ErrInvalidArgument for a key (or prefix) that
// ValidateKey (ValidatePrefix) rejects, and with ctx.Err() once ctx is done.
type Store interface {
	// Put stores data under key, replacing any object there. It is atomic: a concurrent or later Get
	// sees the old object or the new one in full, never a part; after a crash the key holds one or the
	// other. Put does not keep data after it returns.
	Put(ctx context.Context, key string, data []byte) error

	// Get returns the object stored under key, a fresh slice the caller owns, or an error wrapping
	// errdefs.ErrNotFound that names the key.
	Get(ctx context.Context, key string) ([]byte, error)

	// Stat reports the size of the object stored under key, or an error wrapping errdefs.ErrNotFound.
	Stat(ctx context.Context, key string) (size int64, err error)

	// Delete removes the object stored under key. Deleting a missing key succeeds.
	Delete(ctx context.Context, key string) error

	// List calls fn for each object whose key starts with prefix (the empty prefix lists everything),
	// in lexical (byte) order of keys, with its size and last-modified time (when it was last Put).
	// It stops at and reports the first error fn returns. Objects put or deleted while List runs may
	// or may not be reported.
	List(ctx context.Context, prefix string, fn func(key string, size int64, modTime time.Time) error) error
}

// Creator is implemented by stores that can create an object only if its key is free, atomically
// (S3: PutObject with "If-None-Match: *"). Callers that need a key written once and never replaced —
// a snapshot manifest, a tenant's data key — use it when the store offers it.
type Creator interface {
	// Create stores data under key like Put if no object is stored there, and otherwise fails with an
	// error wrapping errdefs.ErrAlreadyExists and leaves the object alone. Of concurrent Creates of one
	// key exactly one succeeds.
	Create(ctx context.Context, key string, data []byte) error
}

// ValidateKey reports an error wrapping errdefs.ErrInvalidArgument unless key is a valid key (see the
// package documentation).
func ValidateKey(key string) error {
	if key == "" || len(key) > MaxKeySize {
		return fmt.Errorf("blob key must be 1..%d bytes: %w", MaxKeySize, errdefs.ErrInvalidArgument)
	}
	if err := checkChars(key); err != nil {
		return fmt.Errorf("blob key %q %w", key, err)
	}
	for seg := range strings.SplitSeq(key, "/") {
		if err := checkSegment(seg); err != nil {
			return fmt.Errorf("blob key %q %w", key, err)
		}
	}
	return nil
}

// ValidatePrefix reports an error wrapping errdefs.ErrInvalidArgument unless prefix could start a
// valid key: at most MaxKeySize bytes of the key alphabet, not starting with '/' and without an empty,
// "." or ".." segment before its last '/'. The empty prefix is valid.
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if len(prefix) > MaxKeySize {
		return fmt.Errorf("blob prefix longer than %d bytes: %w", MaxKeySize, errdefs.ErrInvalidArgument)
	}
	if err := checkChars(prefix); err != nil {
		return fmt.Errorf("blob prefix %q %w", prefix, err)
	}
	segs := strings.Split(prefix, "/")
	for i, seg := range segs {
		if i == len(segs)-1 && len(seg) <= MaxSegmentSize {
			break // the last segment may be partial, even empty
		}
		if err := checkSegment(seg); err != nil {
			return fmt.Errorf("blob prefix %q %w", prefix, err)
		}
	}
	return nil
}

func checkSegment(seg string) error {
	switch {
	case seg == "" || seg == "." || seg == "..":
		return fmt.Errorf("has an empty, \".\" or \"..\" segment: %w", errdefs.ErrInvalidArgument)
	case len(seg) > MaxSegmentSize:
		return fmt.Errorf("has a segment longer than %d bytes: %w", MaxSegmentSize, errdefs.ErrInvalidArgument)
	}
	return nil
}

func checkChars(s string) error {
	for i := 0; i < len(s); i++ {
		if !keyChar(s[i]) {
			return fmt.Errorf("has byte %q at %d; want [A-Za-z0-9._/-]: %w", s[i], i, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

func keyChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '/' || c == '-'
}
