package cluster

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

const (
	joinDocPrefix = "cluster/join/"
	joinPrefix    = "alj_"
	// MaxJoinTokenTTL bounds how long a join token is good for.
	MaxJoinTokenTTL = 30 * 24 * time.Hour
)

// JoinToken is what is known about a join token; its secret is stored only as a hash. A token lets any
// number of nodes join until it expires or is revoked (one token for a whole DaemonSet).
type JoinToken struct {
	ID          string    `json:"id"`
	Description string    `json:"description,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	ExpiresAt   time.Time `json:"expires_at"`
	Hash        []byte    `json:"hash"`
}

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// CreateJoinToken makes a join token good for ttl (at most MaxJoinTokenTTL) and returns it: the token
// itself ("alj_<id>.<secret>", shown once) and its record.
func CreateJoinToken(ctx context.Context, docs store.Docs, ttl time.Duration, description string) (string, JoinToken, error) {
	if ttl <= 0 || ttl > MaxJoinTokenTTL {
		return "", JoinToken{}, fmt.Errorf("join token lifetime %v: want more than 0 and at most %v: %w", ttl, MaxJoinTokenTTL, errdefs.ErrInvalidArgument)
	}
	if len(description) > 256 {
		return "", JoinToken{}, fmt.Errorf("join token description: at most 256 bytes: %w", errdefs.ErrInvalidArgument)
	}
	idb, secret := make([]byte, 10), make([]byte, 20)
	if _, err := rand.Read(idb); err != nil {
		return "", JoinToken{}, err
	}
	if _, err := rand.Read(secret); err != nil {
		return "", JoinToken{}, err
	}
	id := strings.ToLower(b32.EncodeToString(idb))
	sec := strings.ToLower(b32.EncodeToString(secret))
	now := time.Now().UTC()
	sum := sha256.Sum256([]byte(sec))
	t := JoinToken{ID: id, Description: description, CreatedAt: now, ExpiresAt: now.Add(ttl), Hash: sum[:]}
	value, err := json.Marshal(t)
	if err != nil {
		return "", JoinToken{}, err
	}
	if _, err := docs.PutDoc(ctx, store.Doc{Key: joinDocPrefix + id, Value: value}); err != nil {
		return "", JoinToken{}, fmt.Errorf("save join token: %w", err)
	}
	return joinPrefix + id + "." + sec, t, nil
}

// ListJoinTokens reports the join tokens not yet deleted, expired ones included.
func ListJoinTokens(ctx context.Context, docs store.Docs) ([]JoinToken, error) {
	ds, err := docs.ListDocs(ctx, joinDocPrefix)
	if err != nil {
		return nil, err
	}
	out := make([]JoinToken, 0, len(ds))
	for _, d := range ds {
		var t JoinToken
		if err := json.Unmarshal(d.Value, &t); err != nil {
			return nil, fmt.Errorf("join token %s: %w", d.Key, err)
		}
		out = append(out, t)
	}
	return out, nil
}

// DeleteJoinToken revokes a join token: no node joins with it any more (nodes that joined keep their
// certificates). An unknown ID is ErrNotFound.
func DeleteJoinToken(ctx context.Context, docs store.Docs, id string) error {
	d, err := docs.GetDoc(ctx, joinDocPrefix+store.DocKeyPart(id))
	if err != nil {
		return fmt.Errorf("join token %s: %w", id, err)
	}
	return docs.DeleteDoc(ctx, d.Key, d.Version)
}

// errBadJoinToken is every refusal of a join token: the caller learns nothing of why.
var errBadJoinToken = fmt.Errorf("the join token is unknown, revoked or expired: %w", errdefs.ErrPermissionDenied)

// CheckJoinToken returns the record of a join token that is good now, or an error wrapping
// ErrPermissionDenied that does not say what is wrong with it.
func CheckJoinToken(ctx context.Context, docs store.Docs, token string) (JoinToken, error) {
	rest, ok := strings.CutPrefix(token, joinPrefix)
	id, sec, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 || id == "" || sec == "" || len(token) > 128 {
		return JoinToken{}, errBadJoinToken
	}
	d, err := docs.GetDoc(ctx, joinDocPrefix+store.DocKeyPart(id))
	if errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errdefs.ErrInvalidArgument) {
		return JoinToken{}, errBadJoinToken
	}
	if err != nil {
		return JoinToken{}, fmt.Errorf("check join token: %w", err)
	}
	var t JoinToken
	if err := json.Unmarshal(d.Value, &t); err != nil {
		return JoinToken{}, fmt.Errorf("join token %s: %w", id, err)
	}
	sum := sha256.Sum256([]byte(sec))
	if subtle.ConstantTimeCompare(sum[:], t.Hash) != 1 || !time.Now().Before(t.ExpiresAt) {
		return JoinToken{}, errBadJoinToken
	}
	return t, nil
}
