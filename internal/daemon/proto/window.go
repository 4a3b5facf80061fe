package proto

import (
	"context"
	"fmt"
	"sync"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// SendWindow is the sending side's flow-control credit for one stream: the number of data payload bytes
// it may still send before the peer returns credit. Both the daemon and the link use it. It is safe for
// concurrent use. The zero value has no credit; use NewSendWindow.
type SendWindow struct {
	mu     sync.Mutex
	n      int64         // available credit
	wake   chan struct{} // closed and replaced when credit arrives or the window closes
	closed error         // set by Close; waiters return it
}

// NewSendWindow returns a window holding InitialWindow bytes of credit.
func NewSendWindow() *SendWindow {
	return &SendWindow{n: InitialWindow, wake: make(chan struct{})}
}

// Acquire reserves credit for one data frame carrying up to want bytes (want > 0). It waits until the
// window holds more than FrameOverhead, then takes n bytes (1 <= n <= want) plus FrameOverhead. It returns
// early with ctx's error, or with the error given to Close. If fewer than n bytes are sent, the caller
// returns the rest with Release; if no frame is sent at all, with Unreserve(n).
func (w *SendWindow) Acquire(ctx context.Context, want int) (int, error) {
	for {
		w.mu.Lock()
		if w.closed != nil {
			err := w.closed
			w.mu.Unlock()
			return 0, err
		}
		if w.n > FrameOverhead {
			got := min(int64(want), w.n-FrameOverhead)
			w.n -= got + FrameOverhead
			w.mu.Unlock()
			return int(got), nil
		}
		wake := w.wake
		w.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// Release returns credit for n bytes reserved by Acquire and not sent in the frame.
func (w *SendWindow) Release(n int) {
	if n <= 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.addLocked(int64(n))
}

// Unreserve returns a whole reservation of n bytes when no frame was sent.
func (w *SendWindow) Unreserve(n int) { w.Release(n + FrameOverhead) }

// Add adds credit the peer granted with a TypeWindow frame. It reports an error wrapping
// errdefs.ErrInvalidArgument if the credit would exceed what the peer may grant (a protocol violation).
func (w *SendWindow) Add(n uint32) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n+int64(n) > 2*InitialWindow {
		return fmt.Errorf("window credit exceeds %d bytes: %w", 2*InitialWindow, errdefs.ErrInvalidArgument)
	}
	w.addLocked(int64(n))
	return nil
}

func (w *SendWindow) addLocked(n int64) {
	w.n += n
	close(w.wake)
	w.wake = make(chan struct{})
}

// Close makes current and future Acquire calls return err (which must not be nil).
func (w *SendWindow) Close(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed != nil {
		return
	}
	w.closed = err
	close(w.wake)
	w.wake = make(chan struct{})
}

// RecvWindow is the receiving side's accounting for one stream: it checks that the peer stays within the
// credit it was given and tells the consumer when to return credit. It is not safe for concurrent use;
// the owner guards it with the stream's lock.
type RecvWindow struct {
	buffered int // bytes received and not yet consumed
	unacked  int // bytes consumed and not yet returned to the peer
}

// Received records a data frame of n bytes that arrived and reports an error wrapping
// errdefs.ErrResourceExhausted if the peer exceeded its window.
func (w *RecvWindow) Received(n int) error {
	cost := n + FrameOverhead
	if w.buffered+w.unacked+cost > InitialWindow {
		return fmt.Errorf("peer sent %d bytes beyond its flow-control window: %w",
			w.buffered+w.unacked+cost-InitialWindow, errdefs.ErrResourceExhausted)
	}
	w.buffered += cost
	return nil
}

// Consumed records that a received data frame of n bytes was consumed. It returns the credit to send back
// in a TypeWindow frame now, or 0 if the consumer should wait for more to accumulate.
func (w *RecvWindow) Consumed(n int) uint32 {
	cost := n + FrameOverhead
	w.buffered -= cost
	w.unacked += cost
	if w.unacked >= WindowUpdateThreshold {
		u := w.unacked
		w.unacked = 0
		return uint32(u)
	}
	return 0
}
