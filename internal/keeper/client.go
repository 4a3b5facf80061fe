package keeper

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

// Client is a node's hold on its keeper.
type Client struct {
	mu   sync.Mutex
	conn net.Conn // guarded by mu
}

// Attach connects to the keeper at socket; if none answers, it calls start (which starts one) and
// waits for it to answer, up to 10 s or ctx.
func Attach(ctx context.Context, socket string, start func() error) (*Client, error) {
	var d net.Dialer
	if c, err := d.DialContext(ctx, "unix", socket); err == nil {
		return &Client{conn: c}, nil
	}
	if err := start(); err != nil {
		return nil, fmt.Errorf("start the keeper: %w", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := d.DialContext(ctx, "unix", socket)
		if err == nil {
			return &Client{conn: c}, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("the keeper did not answer at %s: %w", socket, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Renew lets the sandboxes run for left from now (at most MaxLease; zero or less: stop them now).
func (c *Client) Renew(left time.Duration) error {
	left = min(max(left, 0), MaxLease)
	return c.send(fmt.Sprintf("%s %d\n", msgRenew, left.Milliseconds()))
}

// Release tells the keeper the node stops with its sandboxes destroyed: the keeper exits without
// stopping anything. It waits for the keeper's answer, up to ctx.
func (c *Client) Release(ctx context.Context) error {
	if err := c.send(msgRelease + "\n"); err != nil {
		return err
	}
	c.mu.Lock()
	conn := c.conn
	c.mu.Unlock()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetReadDeadline(dl)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return fmt.Errorf("release the keeper: %w", err)
	}
	if strings.TrimSpace(line) != ackRelease {
		return fmt.Errorf("release the keeper: it answered %q", line)
	}
	return nil
}

func (c *Client) send(msg string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return errors.New("keeper: closed")
	}
	_ = c.conn.SetWriteDeadline(time.Now().Add(time.Second))
	_, err := c.conn.Write([]byte(msg))
	return err
}

// Close drops the hold without releasing: the keeper runs out the lease as if the node died.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return nil
	}
	err := c.conn.Close()
	c.conn = nil
	return err
}
