package airlock

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// JoinToken is a token with which nodes join the cluster (operator tenant only). Its secret is shown
// once, when it is created. It joins each node once and at most Uses nodes; NodeIDs or NodePrefix, if
// set, are the IDs they may join as; Joined are those that did. Only a token made to Replace (for one
// node ID) takes the place of a node that joined before.
type JoinToken struct {
	ID          string    `json:"id"`
	Description string    `json:"description,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	ExpiresAt   time.Time `json:"expires_at"`
	NodeIDs     []string  `json:"node_ids,omitempty"`
	NodePrefix  string    `json:"node_prefix,omitempty"`
	Uses        int       `json:"uses"`
	Joined      []string  `json:"joined"`
	Replace     bool      `json:"replace,omitempty"`
}

// CreateJoinTokenRequest asks for a join token good for TTLSeconds (default one day, at most 30 days),
// for Uses nodes (default: one, or one for each of NodeIDs). A token for more than one node must name
// the NodeIDs or a NodePrefix they may join as. Replace (with exactly one NodeIDs) approves a new host
// for a node that joined before: the token takes that node's place.
type CreateJoinTokenRequest struct {
	TTLSeconds  int64    `json:"ttl_seconds,omitempty"`
	Description string   `json:"description,omitempty"`
	NodeIDs     []string `json:"node_ids,omitempty"`
	NodePrefix  string   `json:"node_prefix,omitempty"`
	Uses        int      `json:"uses,omitempty"`
	Replace     bool     `json:"replace,omitempty"`
}

// CreatedJoinToken is a new join token and its secret form, given to nodes ("alj_…"), with the
// fingerprint of the cluster CA's certificate ("sha256:<hex>") for them to pin.
type CreatedJoinToken struct {
	JoinToken
	Token         string `json:"token"`
	CAFingerprint string `json:"ca_fingerprint"`
}

// JoinTokenList is a list of join tokens.
type JoinTokenList struct {
	JoinTokens []JoinToken `json:"join_tokens"`
}

// Node is a node that joined the cluster. State is "up" (heard from lately: sandboxes are placed on
// it), "down" (not heard from for 12 seconds), or "new" (never reported); the fields after it come from
// its latest heartbeat.
type Node struct {
	ID              string     `json:"id"`
	Hosts           []string   `json:"hosts"`
	JoinedAt        time.Time  `json:"joined_at"`
	JoinToken       string     `json:"join_token"`
	CertExpiresAt   time.Time  `json:"cert_expires_at"`
	CertFingerprint string     `json:"cert_fingerprint"`
	State           string     `json:"state"`
	Addr            string     `json:"addr,omitempty"`
	LastSeenAt      *time.Time `json:"last_seen_at,omitempty"`
	// Sandboxes is how many of the Store's sandboxes are on it (creating, running or stopping), now;
	// ReportedSandboxes how many it said it runs in its latest heartbeat.
	Sandboxes         int           `json:"sandboxes"`
	ReportedSandboxes int           `json:"reported_sandboxes,omitempty"`
	Version           string        `json:"version,omitempty"`
	Capacity          *NodeCapacity `json:"capacity,omitempty"`
	// Reported is the capacity the node reported; Capacity is that cut to Bound, the most the node is
	// trusted to offer.
	Reported *NodeCapacity `json:"reported,omitempty"`
	Bound    *NodeCapacity `json:"bound,omitempty"`
	// Host names the machine it runs on (a hash; nodes on one machine have the same), from its latest
	// heartbeat.
	Host string `json:"host,omitempty"`
	// Warnings are what the operator should know of it: other nodes on its host that, with it, offer
	// more of the host than it has.
	Warnings []string `json:"warnings,omitempty"`
	// Draining says no sandbox is placed on it any more (DrainNode); its State is "draining" while it
	// is up.
	Draining bool `json:"draining,omitempty"`
	// Runtimes are the runtimes it has, from its latest heartbeat, its default first.
	Runtimes []NodeRuntime `json:"runtimes,omitempty"`
}

// NodeRuntime is a runtime a node has.
type NodeRuntime struct {
	Name string `json:"name"`
	// Abilities are what its sandboxes can do beyond running (memory_snapshots, files_snapshots, fork).
	Abilities []string `json:"abilities"`
	// Accel, for a VM runtime, says how its guests run: "kvm" (hardware virtualisation) or "tcg"
	// (emulated).
	Accel string `json:"accel,omitempty"`
}

// DrainReport is the response of POST /v1/nodes/{id}/drain: the node, now draining, and what was moved.
type DrainReport struct {
	Node Node `json:"node"`
	// Moved are the sessions that now run on another node (To); NotMoved those that could not be (paused
	// if their pause went through, else still running there), with Reason.
	Moved    []MovedSession `json:"moved"`
	NotMoved []MovedSession `json:"not_moved"`
	// Sandboxes are the node's sandboxes of no session: they cannot move and run until they end or are
	// deleted.
	Sandboxes []string `json:"sandboxes"`
}

// MovedSession is a session a drain moved, or could not.
type MovedSession struct {
	TenantID  string `json:"tenant_id"`
	SessionID string `json:"session_id"`
	To        string `json:"to,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// NodeCapacity is what a node offers sandboxes: CPUs (1000 a core) and memory, over-committed, and a
// bound of sandboxes.
type NodeCapacity struct {
	CPUMillicores int64 `json:"cpu_millicores"`
	MemoryMB      int64 `json:"memory_mb"`
	MaxSandboxes  int   `json:"max_sandboxes"`
}

// NodeList is a list of nodes.
type NodeList struct {
	Nodes []Node `json:"nodes"`
}

// JoinRequest is a node asking to join: its join token, its ID, a PEM certificate signing request for
// its key, and the names and addresses control planes reach it at. A node that joined before re-joins
// with Proof (and needs no token); Replace takes the place of a node that joined before with a join
// token made to replace it.
type JoinRequest struct {
	Token   string     `json:"token,omitempty"`
	NodeID  string     `json:"node_id"`
	CSR     string     `json:"csr"`
	Hosts   []string   `json:"hosts"`
	Proof   *JoinProof `json:"proof,omitempty"`
	Replace bool       `json:"replace,omitempty"`
}

// JoinProof proves that a node re-joining holds the key of the certificate it was last given: Signature
// is that key's ECDSA signature (ASN.1) over the request and SignedAt (Unix seconds), as the airlock CLI
// makes it (node join).
type JoinProof struct {
	Certificate string `json:"certificate"`
	SignedAt    int64  `json:"signed_at"`
	Signature   []byte `json:"signature"`
}

// JoinResponse is the node's certificate and the cluster CA's, both PEM.
type JoinResponse struct {
	Node          Node   `json:"node"`
	Certificate   string `json:"certificate"`
	CACertificate string `json:"ca_certificate"`
}

// CreateJoinToken makes a join token.
func (c *Client) CreateJoinToken(ctx context.Context, req CreateJoinTokenRequest) (*CreatedJoinToken, error) {
	var out CreatedJoinToken
	if err := c.doJSON(ctx, http.MethodPost, "/v1/nodes/join-tokens", nil, req, &out, nil); err != nil {
		return nil, fmt.Errorf("create join token: %w", err)
	}
	return &out, nil
}

// ListJoinTokens lists the join tokens, expired ones included.
func (c *Client) ListJoinTokens(ctx context.Context) (*JoinTokenList, error) {
	var out JoinTokenList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/nodes/join-tokens", nil, nil, &out, nil); err != nil {
		return nil, fmt.Errorf("list join tokens: %w", err)
	}
	return &out, nil
}

// DeleteJoinToken revokes a join token.
func (c *Client) DeleteJoinToken(ctx context.Context, id string) error {
	if err := c.doJSON(ctx, http.MethodDelete, "/v1/nodes/join-tokens/"+url.PathEscape(id), nil, nil, nil, nil); err != nil {
		return fmt.Errorf("delete join token %s: %w", id, err)
	}
	return nil
}

// ListNodes lists the nodes that joined the cluster.
func (c *Client) ListNodes(ctx context.Context) (*NodeList, error) {
	var out NodeList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/nodes", nil, nil, &out, nil); err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return &out, nil
}

// SetNodeBound sets the most node id is trusted to offer sandboxes; a zero field keeps the current
// bound's. Operator only.
func (c *Client) SetNodeBound(ctx context.Context, id string, b NodeCapacity) (*Node, error) {
	var out Node
	if err := c.doJSON(ctx, http.MethodPut, "/v1/nodes/"+url.PathEscape(id)+"/bound", nil, b, &out, nil); err != nil {
		return nil, fmt.Errorf("set bound of node %s: %w", id, err)
	}
	return &out, nil
}

// DrainNode takes a node out of placement and moves its sessions to other nodes (each paused and resumed
// elsewhere, nothing lost), before its host is taken down. It returns when they moved.
func (c *Client) DrainNode(ctx context.Context, id string) (*DrainReport, error) {
	var out DrainReport
	if err := c.doJSON(ctx, http.MethodPost, "/v1/nodes/"+url.PathEscape(id)+"/drain", nil, nil, &out, nil); err != nil {
		return nil, fmt.Errorf("drain node %s: %w", id, err)
	}
	return &out, nil
}

// UndrainNode lets sandboxes be placed on a draining node again.
func (c *Client) UndrainNode(ctx context.Context, id string) (*Node, error) {
	var out Node
	if err := c.doJSON(ctx, http.MethodPost, "/v1/nodes/"+url.PathEscape(id)+"/undrain", nil, nil, &out, nil); err != nil {
		return nil, fmt.Errorf("undrain node %s: %w", id, err)
	}
	return &out, nil
}

// RemoveNode forgets a node whose host is gone for good: it must be down, with its sandboxes failed over.
func (c *Client) RemoveNode(ctx context.Context, id string) error {
	if err := c.doJSON(ctx, http.MethodDelete, "/v1/nodes/"+url.PathEscape(id), nil, nil, nil, nil); err != nil {
		return fmt.Errorf("remove node %s: %w", id, err)
	}
	return nil
}

// JoinNode joins a node to the cluster with a join token (no API key is needed).
func (c *Client) JoinNode(ctx context.Context, req JoinRequest) (*JoinResponse, error) {
	var out JoinResponse
	if err := c.doJSON(ctx, http.MethodPost, "/v1/nodes/join", nil, req, &out, nil); err != nil {
		return nil, fmt.Errorf("join node %s: %w", req.NodeID, err)
	}
	return &out, nil
}
