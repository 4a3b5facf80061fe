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
	"slices"
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

// JoinToken is what is known about a join token; its secret is stored only as a hash. A token joins
// each node once, and at most Uses nodes (one by default): a token for more than one node must name the
// IDs they may join as (NodeIDs) or what their IDs start with (NodePrefix), so that its holder cannot
// join as any node it likes. No token takes the place of a node that joined (its ID is refused: the
// node itself re-joins with the proof of its key), except one the operator made for that one ID with
// Replace: the operator's approval of a new host for it.
type JoinToken struct {
	ID          string    `json:"id"`
	Description string    `json:"description,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	ExpiresAt   time.Time `json:"expires_at"`
	Hash        []byte    `json:"hash"`
	// NodeIDs, if any, are the only IDs nodes may join with it as; NodePrefix, if set, is what their IDs
	// must start with. Neither: any ID (a token for one node only).
	NodeIDs    []string `json:"node_ids,omitempty"`
	NodePrefix string   `json:"node_prefix,omitempty"`
	// Uses is how many nodes may join with it (zero, in a token made before uses were counted: one);
	// Joined are the IDs of those that did, in order.
	Uses   int      `json:"uses,omitempty"`
	Joined []string `json:"joined,omitempty"`
	// Replace lets its one node (NodeIDs[0]) take the place of a node of that ID that joined before.
	Replace bool `json:"replace,omitempty"`
}

// MaxUses reports how many nodes may join with the token.
func (t JoinToken) MaxUses() int { return max(t.Uses, 1) }

// permits reports why a node of ID nodeID may not join with the token (nil: it may).
func (t JoinToken) permits(nodeID string) error {
	switch {
	case len(t.NodeIDs) > 0 && !slices.Contains(t.NodeIDs, nodeID):
		return fmt.Errorf("join token %s is for nodes %s only, not %s: %w", t.ID, strings.Join(t.NodeIDs, ", "), nodeID, errdefs.ErrPermissionDenied)
	case !strings.HasPrefix(nodeID, t.NodePrefix):
		return fmt.Errorf("join token %s is for node IDs that start with %q only, not %s: %w", t.ID, t.NodePrefix, nodeID, errdefs.ErrPermissionDenied)
	case slices.Contains(t.Joined, nodeID):
		return fmt.Errorf("join token %s joined node %s already; a token joins each node once (that node re-joins from its host, "+
			"whose key proves it): %w", t.ID, nodeID, errdefs.ErrPermissionDenied)
	case len(t.Joined) >= t.MaxUses():
		return fmt.Errorf("join token %s is used up (%d of %d nodes joined with it): %w", t.ID, len(t.Joined), t.MaxUses(), errdefs.ErrPermissionDenied)
	}
	return nil
}

// JoinTokenOptions shape a join token (CreateJoinToken).
type JoinTokenOptions struct {
	// TTL is how long nodes may join with it: more than zero, at most MaxJoinTokenTTL.
	TTL time.Duration
	// Description says what it is for (at most 256 bytes).
	Description string
	// NodeIDs, if any, are the only IDs nodes may join with it as (at most MaxJoinTokenUses, each once);
	// NodePrefix, if set, what their IDs must start with. At most one of the two.
	NodeIDs    []string
	NodePrefix string
	// Uses is how many nodes may join with it, at most MaxJoinTokenUses (and at most len(NodeIDs)); more
	// than one needs NodeIDs or NodePrefix. Zero: len(NodeIDs) if any, else one.
	Uses int
	// Replace lets the token's node take the place of a node of its ID that joined before: it needs
	// exactly one NodeIDs and one use.
	Replace bool
}

// MaxJoinTokenUses bounds how many nodes may join with one join token.
const MaxJoinTokenUses = 1000

// check reports what is wrong with o, and o with its defaults filled in.
func (o JoinTokenOptions) check() (JoinTokenOptions, error) {
	bad := func(format string, args ...any) (JoinTokenOptions, error) {
		return o, fmt.Errorf("join token: "+format+": %w", append(args, errdefs.ErrInvalidArgument)...)
	}
	if o.TTL <= 0 || o.TTL > MaxJoinTokenTTL {
		return bad("lifetime %v: want more than 0 and at most %v", o.TTL, MaxJoinTokenTTL)
	}
	if len(o.Description) > 256 {
		return bad("description: at most 256 bytes")
	}
	if len(o.NodeIDs) > MaxJoinTokenUses {
		return bad("%d node IDs: at most %d", len(o.NodeIDs), MaxJoinTokenUses)
	}
	for i, id := range o.NodeIDs {
		if err := CheckID(id); err != nil {
			return bad("node ID %q: want 1 to 64 of a-z, 0-9 and '-', not starting with '-'", id)
		}
		if slices.Contains(o.NodeIDs[:i], id) {
			return bad("node ID %s named twice", id)
		}
	}
	if o.NodePrefix != "" {
		if len(o.NodePrefix) > 63 || CheckID(o.NodePrefix) != nil {
			return bad("node prefix %q: want 1 to 63 of a-z, 0-9 and '-', not starting with '-'", o.NodePrefix)
		}
		if len(o.NodeIDs) > 0 {
			return bad("node IDs or a node prefix, not both")
		}
	}
	if o.Uses < 0 || o.Uses > MaxJoinTokenUses {
		return bad("uses %d: want 1 to %d", o.Uses, MaxJoinTokenUses)
	}
	if o.Uses == 0 {
		o.Uses = max(len(o.NodeIDs), 1)
	}
	if len(o.NodeIDs) > 0 && o.Uses > len(o.NodeIDs) {
		return bad("uses %d: more than the %d node IDs it names (each joins once)", o.Uses, len(o.NodeIDs))
	}
	if o.Uses > 1 && len(o.NodeIDs) == 0 && o.NodePrefix == "" {
		return bad("a token for %d nodes must name the node IDs or a prefix they may join as (one token for any ID would let "+
			"its holder join as any node it likes)", o.Uses)
	}
	if o.Replace && (len(o.NodeIDs) != 1 || o.Uses != 1) {
		return bad("a token that replaces a node names exactly one node ID and joins once")
	}
	return o, nil
}

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// CreateJoinToken makes a join token as o says and returns it: the token itself ("alj_<id>.<secret>",
// shown once) and its record. Bad options are ErrInvalidArgument.
func CreateJoinToken(ctx context.Context, docs store.Docs, o JoinTokenOptions) (string, JoinToken, error) {
	o, err := o.check()
	if err != nil {
		return "", JoinToken{}, err
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
	t := JoinToken{ID: id, Description: o.Description, CreatedAt: now, ExpiresAt: now.Add(o.TTL), Hash: sum[:],
		NodeIDs: slices.Clone(o.NodeIDs), NodePrefix: o.NodePrefix, Uses: o.Uses, Replace: o.Replace}
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

// errBadJoinToken is every refusal of a join token's secret: the caller learns nothing of why.
var errBadJoinToken = fmt.Errorf("the join token is unknown, revoked or expired: %w", errdefs.ErrPermissionDenied)

// CheckJoinToken returns the record of a join token that is good now, or an error wrapping
// ErrPermissionDenied that does not say what is wrong with it. It does not use the token up (UseJoinToken
// does).
func CheckJoinToken(ctx context.Context, docs store.Docs, token string) (JoinToken, error) {
	t, _, err := checkJoinToken(ctx, docs, token)
	return t, err
}

// checkJoinToken is CheckJoinToken that also returns the token's document.
func checkJoinToken(ctx context.Context, docs store.Docs, token string) (JoinToken, store.Doc, error) {
	rest, ok := strings.CutPrefix(token, joinPrefix)
	id, sec, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 || id == "" || sec == "" || len(token) > 128 {
		return JoinToken{}, store.Doc{}, errBadJoinToken
	}
	d, err := docs.GetDoc(ctx, joinDocPrefix+store.DocKeyPart(id))
	if errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errdefs.ErrInvalidArgument) {
		return JoinToken{}, store.Doc{}, errBadJoinToken
	}
	if err != nil {
		return JoinToken{}, store.Doc{}, fmt.Errorf("check join token: %w", err)
	}
	var t JoinToken
	if err := json.Unmarshal(d.Value, &t); err != nil {
		return JoinToken{}, store.Doc{}, fmt.Errorf("join token %s: %w", id, err)
	}
	sum := sha256.Sum256([]byte(sec))
	if subtle.ConstantTimeCompare(sum[:], t.Hash) != 1 || !time.Now().Before(t.ExpiresAt) {
		return JoinToken{}, store.Doc{}, errBadJoinToken
	}
	return t, d, nil
}

// UseJoinToken checks a join token (as CheckJoinToken) and uses it up for the node nodeID: the token
// must let that ID join (its NodeIDs or NodePrefix), have a use left, and not have joined that ID
// before; replace says the node takes the place of one that joined with that ID, which only a token
// made to Replace may. A refusal wraps ErrPermissionDenied. Of joins with one token at once, no more
// than its uses go through (compare-and-swap on its record). It returns the token as recorded now.
func UseJoinToken(ctx context.Context, docs store.Docs, token, nodeID string, replace bool) (JoinToken, error) {
	for range 8 {
		t, d, err := checkJoinToken(ctx, docs, token)
		if err != nil {
			return JoinToken{}, err
		}
		if replace && !t.Replace {
			return JoinToken{}, fmt.Errorf("join token %s may not take the place of node %s, which joined before: only the node itself can "+
				"(from its host: its key proves it), or a token the operator makes for it (node token create --node-id %s --replace): %w",
				t.ID, nodeID, nodeID, errdefs.ErrPermissionDenied)
		}
		if err := t.permits(nodeID); err != nil {
			return JoinToken{}, err
		}
		t.Joined = append(t.Joined, nodeID)
		if d.Value, err = json.Marshal(t); err != nil {
			return JoinToken{}, err
		}
		_, err = docs.PutDoc(ctx, d)
		if err == nil {
			return t, nil
		}
		if errors.Is(err, errdefs.ErrNotFound) {
			return JoinToken{}, errBadJoinToken // revoked meanwhile
		}
		if !errors.Is(err, errdefs.ErrConflict) {
			return JoinToken{}, fmt.Errorf("use join token %s: %w", t.ID, err)
		}
	}
	return JoinToken{}, fmt.Errorf("join token: used by too many joins at once; try again: %w", errdefs.ErrUnavailable)
}

// ReleaseJoinToken gives back the use of join token id that UseJoinToken took for nodeID, whose join did
// not go through. A token revoked meanwhile is no error.
func ReleaseJoinToken(ctx context.Context, docs store.Docs, id, nodeID string) error {
	for range 8 {
		d, err := docs.GetDoc(ctx, joinDocPrefix+store.DocKeyPart(id))
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("release join token %s: %w", id, err)
		}
		var t JoinToken
		if err := json.Unmarshal(d.Value, &t); err != nil {
			return fmt.Errorf("join token %s: %w", id, err)
		}
		i := slices.Index(t.Joined, nodeID)
		if i < 0 {
			return nil
		}
		t.Joined = slices.Delete(t.Joined, i, i+1)
		if d.Value, err = json.Marshal(t); err != nil {
			return err
		}
		if _, err = docs.PutDoc(ctx, d); err == nil || errors.Is(err, errdefs.ErrNotFound) {
			return nil
		}
		if !errors.Is(err, errdefs.ErrConflict) {
			return fmt.Errorf("release join token %s: %w", id, err)
		}
	}
	return fmt.Errorf("release join token %s: it changes too often: %w", id, errdefs.ErrConflict)
}
