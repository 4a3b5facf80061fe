package airlock

import (
	"context"
	"net/http"
	"net/url"
)

// CreateJoinToken makes a join token.
func (c *Client) CreateJoinToken(ctx context.Context, req CreateJoinTokenRequest) (*CreatedJoinToken, error) {
	return callJSON[CreatedJoinToken](ctx, c, http.MethodPost, "/v1/nodes/join-tokens", nil, req, "create join token")
}

// ListJoinTokens lists the join tokens, expired ones included.
func (c *Client) ListJoinTokens(ctx context.Context) (*JoinTokenList, error) {
	return callJSON[JoinTokenList](ctx, c, http.MethodGet, "/v1/nodes/join-tokens", nil, nil, "list join tokens")
}

// DeleteJoinToken revokes a join token.
func (c *Client) DeleteJoinToken(ctx context.Context, id string) error {
	return c.callNoAnswer(ctx, http.MethodDelete, "/v1/nodes/join-tokens/"+url.PathEscape(id), nil, nil, "delete join token %s", id)
}

// ListNodes lists the nodes that joined the cluster.
func (c *Client) ListNodes(ctx context.Context) (*NodeList, error) {
	return callJSON[NodeList](ctx, c, http.MethodGet, "/v1/nodes", nil, nil, "list nodes")
}

// SetNodeBound sets the most node id is trusted to offer sandboxes; a zero field keeps the current
// bound's. Operator only.
func (c *Client) SetNodeBound(ctx context.Context, id string, b NodeCapacity) (*Node, error) {
	return callJSON[Node](ctx, c, http.MethodPut, "/v1/nodes/"+url.PathEscape(id)+"/bound", nil, b, "set bound of node %s", id)
}

// DrainNode takes a node out of placement and moves its sessions to other nodes (each paused and resumed
// elsewhere, nothing lost), before its host is taken down. It returns when they moved.
func (c *Client) DrainNode(ctx context.Context, id string) (*DrainReport, error) {
	return callJSON[DrainReport](ctx, c, http.MethodPost, "/v1/nodes/"+url.PathEscape(id)+"/drain", nil, nil, "drain node %s", id)
}

// UndrainNode lets sandboxes be placed on a draining node again.
func (c *Client) UndrainNode(ctx context.Context, id string) (*Node, error) {
	return callJSON[Node](ctx, c, http.MethodPost, "/v1/nodes/"+url.PathEscape(id)+"/undrain", nil, nil, "undrain node %s", id)
}

// RemoveNode forgets a node whose host is gone for good: it must be down, with its sandboxes failed over.
func (c *Client) RemoveNode(ctx context.Context, id string) error {
	return c.callNoAnswer(ctx, http.MethodDelete, "/v1/nodes/"+url.PathEscape(id), nil, nil, "remove node %s", id)
}

// JoinNode joins a node to the cluster with a join token (no API key is needed).
func (c *Client) JoinNode(ctx context.Context, req JoinRequest) (*JoinResponse, error) {
	return callJSON[JoinResponse](ctx, c, http.MethodPost, "/v1/nodes/join", nil, req, "join node %s", req.NodeID)
}
