package airlock

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
)

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
