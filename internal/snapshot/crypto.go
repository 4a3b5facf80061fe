package snapshot

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/keys"
)

const (
	// formatV1 is the version of the data-key record, the chunk and manifest blobs and the manifest.
	formatV1 = 1
	// flagZstd marks a sealed payload compressed with zstd.
	flagZstd = 0x01

	headerSize = 2 // format version, flags
	nonceSize  = 12
	sealedMin  = headerSize + nonceSize + 16 // + the GCM tag

	chunkAADPrefix    = "airlock/snapshot chunk v1\x00"
	manifestAADPrefix = "airlock/snapshot manifest v1\x00"

	// maxManifestSize bounds a decoded manifest (a million chunk references take about 100 MB).
	maxManifestSize = 512 << 20
)

// HKDF info strings of the subkeys; the tenant ID is appended.
const (
	infoChunkKey    = "airlock/snapshot v1 chunk encryption\x00"
	infoIDKey       = "airlock/snapshot v1 chunk id\x00"
	infoManifestKey = "airlock/snapshot v1 manifest encryption\x00"
)

// The zstd codecs are stateless for EncodeAll/DecodeAll and safe for concurrent use; they start no
// goroutines. Their concurrency bounds the calls that run at once (others wait) and so their memory.
var (
	zstdEncoder = sync.OnceValues(func() (*zstd.Encoder, error) {
		return zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest),
			zstd.WithEncoderConcurrency(max(uploadWorkers, runtime.GOMAXPROCS(0))))
	})
	chunkDecoder = sync.OnceValues(func() (*zstd.Decoder, error) {
		return zstd.NewReader(nil, zstd.WithDecoderMaxMemory(MaxChunkSize),
			zstd.WithDecoderConcurrency(max(readAhead+1, runtime.GOMAXPROCS(0))))
	})
	manifestDecoder = sync.OnceValues(func() (*zstd.Decoder, error) {
		return zstd.NewReader(nil, zstd.WithDecoderMaxMemory(maxManifestSize), zstd.WithDecoderConcurrency(1))
	})
)

// dataKeyRecord is the JSON stored at tenants/<tenant>/datakey.
type dataKeyRecord struct {
	Version   int       `json:"version"`
	Tenant    string    `json:"tenant"`
	KeyID     string    `json:"key_id"`
	Wrapped   []byte    `json:"wrapped"`
	CreatedAt time.Time `json:"created_at"`
}

// tenantKeys are the subkeys of one tenant, held for one operation and cleared after it.
type tenantKeys struct {
	tenant string
	// rec is the stored data-key record, kept to check for revocation again (it holds no clear key).
	rec dataKeyRecord

	chunkAEAD    cipher.AEAD
	manifestAEAD cipher.AEAD
	idKey        []byte
}

// clear drops the subkeys. (The AES key schedules inside the AEADs are unreachable afterwards but
// cannot be wiped.)
func (k *tenantKeys) clear() {
	if k == nil {
		return
	}
	clear(k.idKey)
	k.idKey, k.chunkAEAD, k.manifestAEAD = nil, nil, nil
}

// LogValue prints the tenant only.
func (k *tenantKeys) LogValue() slog.Value {
	return slog.GroupValue(slog.String("tenant", k.tenant), slog.String("keys", "REDACTED"))
}

// loadKeys unwraps tenantID's data key and derives its subkeys. With create set, a tenant without a
// data key gets one; otherwise that is ErrNotFound. A revoked key is ErrPermissionDenied; a stored key
// that is malformed or does not unwrap is ErrCorrupt.
func (s *Store) loadKeys(ctx context.Context, tenantID string, create bool) (*tenantKeys, error) {
	rec, err := s.dataKeyRecord(ctx, tenantID)
	if errors.Is(err, errdefs.ErrNotFound) && create {
		rec, err = s.newDataKey(ctx, tenantID)
	}
	if err != nil {
		return nil, err
	}
	dek, err := s.unwrap(ctx, rec)
	if err != nil {
		return nil, err
	}
	defer clear(dek)
	k, err := deriveKeys(dek, tenantID)
	if err != nil {
		return nil, err
	}
	k.rec = rec
	return k, nil
}

// checkKey reports an error (ErrPermissionDenied if revoked) unless k's data key still unwraps.
func (s *Store) checkKey(ctx context.Context, k *tenantKeys) error {
	if k.rec.KeyID == "" {
		return nil // from a Grant: whoever made it checked
	}
	dek, err := s.unwrap(ctx, k.rec)
	clear(dek)
	return err
}

func (s *Store) unwrap(ctx context.Context, rec dataKeyRecord) ([]byte, error) {
	dek, err := s.keys.UnwrapKey(ctx, rec.Tenant, rec.KeyID, rec.Wrapped)
	switch {
	case errors.Is(err, errdefs.ErrPermissionDenied):
		return nil, err
	case errors.Is(err, errdefs.ErrNotFound), errors.Is(err, errdefs.ErrInvalidArgument):
		// A stored key the provider does not know or that does not authenticate is damage (or the
		// wrong keyring), not a bad request.
		return nil, fmt.Errorf("data key of tenant %s does not unwrap: %v: %w", rec.Tenant, err, ErrCorrupt)
	case err != nil:
		return nil, fmt.Errorf("unwrap data key of tenant %s: %w", rec.Tenant, err) // canceled, unavailable…
	case len(dek) != keys.DataKeySize:
		clear(dek)
		return nil, fmt.Errorf("data key of tenant %s has %d bytes: %w", rec.Tenant, len(dek), ErrCorrupt)
	}
	return dek, nil
}

func (s *Store) dataKeyRecord(ctx context.Context, tenantID string) (dataKeyRecord, error) {
	data, err := s.blobs.Get(ctx, dataKeyKey(tenantID))
	if errors.Is(err, errdefs.ErrNotFound) {
		return dataKeyRecord{}, fmt.Errorf("tenant %s has no data key: %w", tenantID, errdefs.ErrNotFound)
	}
	if err != nil {
		return dataKeyRecord{}, fmt.Errorf("data key of tenant %s: %w", tenantID, err)
	}
	var rec dataKeyRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return dataKeyRecord{}, fmt.Errorf("data key of tenant %s is malformed: %w", tenantID, ErrCorrupt)
	}
	if rec.Version != formatV1 || rec.Tenant != tenantID || rec.KeyID == "" || len(rec.Wrapped) == 0 {
		return dataKeyRecord{}, fmt.Errorf("data key of tenant %s is malformed or belongs to tenant %q: %w", tenantID, rec.Tenant, ErrCorrupt)
	}
	return rec, nil
}

// newDataKey makes, wraps and stores a data key for tenantID, or returns the one stored first by a
// concurrent caller.
func (s *Store) newDataKey(ctx context.Context, tenantID string) (dataKeyRecord, error) {
	select {
	case s.create <- struct{}{}:
		defer func() { <-s.create }()
	case <-ctx.Done():
		return dataKeyRecord{}, ctx.Err()
	}
	if rec, err := s.dataKeyRecord(ctx, tenantID); !errors.Is(err, errdefs.ErrNotFound) {
		return rec, err // made while we waited, or broken
	}
	dek, err := keys.NewDataKey()
	if err != nil {
		return dataKeyRecord{}, err
	}
	defer clear(dek)
	wrapped, keyID, err := s.keys.WrapKey(ctx, tenantID, dek)
	if err != nil {
		return dataKeyRecord{}, fmt.Errorf("wrap data key of tenant %s: %w", tenantID, err)
	}
	rec := dataKeyRecord{Version: formatV1, Tenant: tenantID, KeyID: keyID, Wrapped: wrapped, CreatedAt: s.now().UTC()}
	data, err := json.Marshal(&rec)
	if err != nil {
		return dataKeyRecord{}, err
	}
	err = s.createBlob(ctx, dataKeyKey(tenantID), data)
	if errors.Is(err, errdefs.ErrAlreadyExists) {
		return s.dataKeyRecord(ctx, tenantID) // another process was first
	}
	if err != nil {
		return dataKeyRecord{}, fmt.Errorf("store data key of tenant %s: %w", tenantID, err)
	}
	s.log.Debug("snapshot: created data key", "tenant", tenantID, "key_id", keyID)
	return rec, nil
}

// deriveKeys derives a tenant's subkeys from its data key.
func deriveKeys(dek []byte, tenantID string) (*tenantKeys, error) {
	ck, mk, ik, err := subkeys(dek, tenantID)
	if err != nil {
		return nil, err
	}
	defer clear(ck)
	defer clear(mk)
	defer clear(ik)
	return keysOf(tenantID, ck, mk, ik)
}

// subkeys derives the chunk, manifest and ID keys of a tenant from its data key.
func subkeys(dek []byte, tenantID string) (chunk, manifest, id []byte, err error) {
	sub := func(info string) ([]byte, error) { return hkdf.Key(sha256.New, dek, nil, info+tenantID, 32) }
	if chunk, err = sub(infoChunkKey); err != nil {
		return nil, nil, nil, err
	}
	if manifest, err = sub(infoManifestKey); err != nil {
		return nil, nil, nil, err
	}
	if id, err = sub(infoIDKey); err != nil {
		return nil, nil, nil, err
	}
	return chunk, manifest, id, nil
}

// keysOf returns the tenantKeys of the given subkeys, which it copies.
func keysOf(tenantID string, chunk, manifest, id []byte) (*tenantKeys, error) {
	k := &tenantKeys{tenant: tenantID, idKey: append([]byte(nil), id...)}
	var err error
	if k.chunkAEAD, err = newAEAD(chunk); err != nil {
		return nil, err
	}
	if k.manifestAEAD, err = newAEAD(manifest); err != nil {
		return nil, err
	}
	return k, nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// idHash returns a fresh keyed hash naming chunks.
func (k *tenantKeys) idHash() hash.Hash { return hmac.New(sha256.New, k.idKey) }

// chunkID returns the ID of a chunk of plaintext p, using h (from idHash).
func chunkID(h hash.Hash, p []byte) string {
	h.Reset()
	h.Write(p)
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0]))
}

// validChunkID reports whether id is 64 lowercase hex digits.
func validChunkID(id string) bool {
	if len(id) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func chunkAAD(tenantID, id string, header []byte) []byte {
	b := make([]byte, 0, len(chunkAADPrefix)+len(tenantID)+len(id)+2+headerSize)
	b = append(b, chunkAADPrefix...)
	b = append(b, tenantID...)
	b = append(b, 0)
	b = append(b, id...)
	b = append(b, 0)
	return append(b, header...)
}

func manifestAAD(tenantID, snapshotID string, header []byte) []byte {
	b := make([]byte, 0, len(manifestAADPrefix)+len(tenantID)+len(snapshotID)+2+headerSize)
	b = append(b, manifestAADPrefix...)
	b = append(b, tenantID...)
	b = append(b, 0)
	b = append(b, snapshotID...)
	b = append(b, 0)
	return append(b, header...)
}

// seal compresses p if that shrinks it, encrypts it and returns the blob, built in out (reused if
// large enough). aad returns the additional data for a header.
func seal(aead cipher.AEAD, p, out []byte, aad func(header []byte) []byte) ([]byte, error) {
	const pre = headerSize + nonceSize
	out = slices.Grow(out[:0], pre+len(p)+aead.Overhead())[:pre]
	out[0], out[1] = formatV1, 0
	if _, err := rand.Read(out[headerSize:pre]); err != nil {
		return nil, err
	}
	if len(p) > 0 {
		enc, err := zstdEncoder()
		if err != nil {
			return nil, err
		}
		out = enc.EncodeAll(p, out)
	}
	if n := len(out) - pre; n > 0 && n < len(p) {
		out[1] = flagZstd
	} else {
		out = append(out[:pre], p...)
	}
	// Encrypt in place: Seal may use the plaintext's storage when dst is plaintext[:0].
	if cap(out)-len(out) < aead.Overhead() {
		out = append(out, make([]byte, aead.Overhead())...)[:len(out)]
	}
	body := aead.Seal(out[pre:pre], out[headerSize:pre], out[pre:], aad(out[:headerSize]))
	return out[:pre+len(body)], nil
}

// openSealed authenticates and decrypts a blob made by seal, in place, and returns the payload (still
// compressed if compressed is set). It fails with errMalformed or errUnauthentic.
func openSealed(aead cipher.AEAD, data []byte, aad func(header []byte) []byte) (payload []byte, compressed bool, err error) {
	if len(data) < sealedMin || data[0] != formatV1 || data[1]&^flagZstd != 0 {
		return nil, false, errMalformed
	}
	const pre = headerSize + nonceSize
	p, err := aead.Open(data[pre:pre], data[headerSize:pre], data[pre:], aad(data[:headerSize]))
	if err != nil {
		return nil, false, errUnauthentic
	}
	return p, data[1]&flagZstd != 0, nil
}

var (
	errMalformed   = errors.New("malformed (corrupted)")
	errUnauthentic = errors.New("does not authenticate (corrupted)")
)

// sealChunk encrypts chunk id with plaintext p into a blob, reusing out's storage.
func (k *tenantKeys) sealChunk(id string, p, out []byte) ([]byte, error) {
	return seal(k.chunkAEAD, p, out, func(h []byte) []byte { return chunkAAD(k.tenant, id, h) })
}

// openChunk checks and decrypts the blob of chunk ref of snapshot snapshotID's file, reusing data's
// storage, and returns its plaintext or a *CorruptError.
func (k *tenantKeys) openChunk(snapshotID, file string, ref ChunkRef, data []byte) ([]byte, error) {
	bad := func(reason string) error {
		return &CorruptError{Snapshot: snapshotID, File: file, Chunk: ref.ID, Reason: reason}
	}
	p, compressed, err := openSealed(k.chunkAEAD, data, func(h []byte) []byte { return chunkAAD(k.tenant, ref.ID, h) })
	if err != nil {
		return nil, bad(err.Error())
	}
	if compressed {
		dec, err := chunkDecoder()
		if err != nil {
			return nil, err
		}
		if p, err = dec.DecodeAll(p, make([]byte, 0, ref.Size)); err != nil {
			return nil, bad("does not decompress (corrupted)")
		}
	}
	if int64(len(p)) != ref.Size {
		return nil, bad(fmt.Sprintf("has %d bytes; manifest says %d (corrupted)", len(p), ref.Size))
	}
	if id := chunkID(k.idHash(), p); !hmac.Equal([]byte(id), []byte(ref.ID)) {
		return nil, bad("content does not match its ID (corrupted)")
	}
	return p, nil
}

// sealManifest encrypts m.
func (k *tenantKeys) sealManifest(m *Manifest) ([]byte, error) {
	js, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return seal(k.manifestAEAD, js, nil, func(h []byte) []byte { return manifestAAD(k.tenant, m.ID, h) })
}

// openManifest checks, decrypts and decodes the manifest blob of snapshot id, or returns a
// *CorruptError.
func (k *tenantKeys) openManifest(id string, data []byte) (Manifest, error) {
	bad := func(reason string) error { return &CorruptError{Snapshot: id, Reason: "manifest " + reason} }
	p, compressed, err := openSealed(k.manifestAEAD, data, func(h []byte) []byte { return manifestAAD(k.tenant, id, h) })
	if err != nil {
		return Manifest{}, bad(err.Error())
	}
	if compressed {
		dec, err := manifestDecoder()
		if err != nil {
			return Manifest{}, err
		}
		if p, err = dec.DecodeAll(p, nil); err != nil {
			return Manifest{}, bad("does not decompress (corrupted)")
		}
	}
	var m Manifest
	if err := json.Unmarshal(p, &m); err != nil {
		return Manifest{}, bad("does not decode (corrupted)")
	}
	if err := m.check(k.tenant, id); err != nil {
		return Manifest{}, bad(fmt.Sprintf("is inconsistent: %v", err))
	}
	return m, nil
}

// check reports what is wrong with a decoded manifest, which authenticated, so that a bug of a
// writer does not become a read outside the snapshot or a huge allocation.
func (m *Manifest) check(tenantID, id string) error {
	switch {
	case m.Version != formatV1:
		return fmt.Errorf("format version %d", m.Version)
	case m.Tenant != tenantID || m.ID != id:
		return fmt.Errorf("names snapshot %s of tenant %s", m.ID, m.Tenant)
	}
	var tree fileTree
	var total int64
	for _, f := range m.Files {
		if err := tree.add(f.Name); err != nil {
			return err
		}
		var size int64
		for _, c := range f.Chunks {
			if !validChunkID(c.ID) || c.Size <= 0 || c.Size > MaxChunkSize {
				return fmt.Errorf("file %s has a bad chunk reference %q (%d bytes)", f.Name, c.ID, c.Size)
			}
			size += c.Size
		}
		if size != f.Size {
			return fmt.Errorf("file %s has %d bytes of chunks; size %d", f.Name, size, f.Size)
		}
		total += size
	}
	if total != m.Stats.LogicalBytes {
		return fmt.Errorf("files total %d bytes; stats say %d", total, m.Stats.LogicalBytes)
	}
	return nil
}

// RewrapDataKey wraps the tenant's data key again under its current key-encryption key (after a
// rotation) and reports whether there was one. No chunk or manifest is rewritten: they stay sealed
// under the same data key.
func (s *Store) RewrapDataKey(ctx context.Context, tenantID string) (bool, error) {
	rec, err := s.dataKeyRecord(ctx, tenantID)
	if errors.Is(err, errdefs.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	wrapped, keyID, err := keys.Rewrap(ctx, s.keys, tenantID, rec.KeyID, rec.Wrapped)
	if err != nil {
		return false, fmt.Errorf("rewrap data key of tenant %s: %w", tenantID, err)
	}
	rec.KeyID, rec.Wrapped = keyID, wrapped
	data, err := json.Marshal(&rec)
	if err != nil {
		return false, err
	}
	// One record per tenant, replaced whole (a blob Put is atomic): readers see the old wrapping or the
	// new, both of the same data key.
	if err := s.blobs.Put(ctx, dataKeyKey(tenantID), data); err != nil {
		return false, fmt.Errorf("rewrap data key of tenant %s: %w", tenantID, err)
	}
	return true, nil
}
