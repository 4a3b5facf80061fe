// Package proto defines the wire protocol between the Airlock node (the link client) and the in-sandbox
// daemon: one multiplexed byte stream carrying binary frames.
//
// # Frames
//
// Every frame is a 9-byte header followed by a payload:
//
//	uint32 payload length (big endian, at most MaxPayload) | uint8 type | uint32 stream id | payload
//
// A reader never allocates more than MaxPayload bytes for a frame; a larger length is rejected before
// anything is read (see ReadFrame).
//
// # Streams
//
// The client (node) opens a stream by sending a TypeRequest frame with a fresh, non-zero stream id and a
// JSON Request payload. The daemon answers on the same id and ends every stream with exactly one
// TypeResponse frame (a result or an Error); before it the daemon may send TypeData and TypeEvent frames.
// After the response the id is free on the daemon side. The client may send TypeData frames (stdin, file
// contents) and then one TypeClose frame to mark the end of its input, and TypeCancel at any time to abort
// the call (for an attach: to detach without touching the process). Frames for unknown streams are
// ignored, because either side may have forgotten a stream that the other still talks about.
//
// Between a node and a control plane the daemon's connection is shared (link.Mux), and the node may drop
// a control plane's connection (a checkpoint replaces the daemon's): it then sends one TypeGoAway frame,
// on stream 0, naming the last of the client's streams it passed on; later ones never reached the daemon.
//
// # Flow control
//
// Data frames are flow controlled per stream and direction. A data frame carrying n bytes costs
// n+FrameOverhead credit (so tiny frames cannot make a receiver queue unbounded numbers of items). Each
// side starts with InitialWindow credit per stream and the peer returns credit with TypeWindow frames
// (uint32 increments) as it consumes. A receiver therefore buffers at most InitialWindow per stream, and
// one slow consumer never blocks the connection for other streams. Exceeding the window is a protocol
// error and the receiver drops the connection. Control frames are not flow controlled; they are small and
// bounded per stream: one request, close and response each, and the daemon sends at most two dropped
// events per data frame plus the started and exit events.
package proto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// Version is the protocol version this package speaks; Info reports it.
const Version = 1

// The control directory is a directory the host writes and the sandbox can only read (mounted
// read-only): the node signals the daemon through it without creating anything where a process in the
// sandbox could have planted a link. It holds:
const (
	// ControlKey is the file of the sandbox's link key (LinkKeySize bytes, readable by root only), with
	// which the daemon proves on every connection that it is this sandbox's (see OpHello and Proof).
	ControlKey = "key"
	// ControlWake is the file whose contents the host changes to wake a quiesced daemon (the daemon
	// compares them with what they were when it quiesced, every few milliseconds).
	ControlWake = "wake"
	// ControlEnv, if present, holds the base environment (KEY=VALUE entries, each ended by a NUL byte,
	// at most MaxCommandBytes; readable by root only) that a daemon restored from a template's start
	// snapshot takes in place of the one it was checkpointed with, on waking.
	ControlEnv = "env"
)

// ParseControlEnv parses the contents of a ControlEnv file, checking every entry as a request's env.
func ParseControlEnv(b []byte) ([]string, error) {
	if len(b) > MaxCommandBytes {
		return nil, fmt.Errorf("the environment file has %d bytes, over %d: %w", len(b), MaxCommandBytes, errdefs.ErrInvalidArgument)
	}
	if len(b) == 0 {
		return []string{}, nil
	}
	if b[len(b)-1] != 0 {
		return nil, fmt.Errorf("the environment file does not end with a NUL byte: %w", errdefs.ErrInvalidArgument)
	}
	env := strings.Split(string(b[:len(b)-1]), "\x00")
	if err := validateCommand([]string{"env"}, env, "", ""); err != nil {
		return nil, err
	}
	return env, nil
}

// FormatControlEnv is the contents of a ControlEnv file holding env.
func FormatControlEnv(env []string) []byte {
	var b []byte
	for _, e := range env {
		b = append(append(b, e...), 0)
	}
	return b
}

// LinkKeySize is the size of a sandbox's link key in bytes.
const LinkKeySize = 32

// Frame size limits.
const (
	// HeaderSize is the size of a frame header in bytes.
	HeaderSize = 9
	// MaxPayload is the largest payload a frame may carry. Readers reject larger frames.
	MaxPayload = 1 << 20
	// DataHeaderSize is the size of the channel and offset prefix of a data payload.
	DataHeaderSize = 9
	// MaxDataChunk is the largest number of bytes one data frame can carry.
	MaxDataChunk = MaxPayload - DataHeaderSize
	// ChunkSize is the data chunk size senders use; smaller than MaxDataChunk so one large transfer does
	// not hold the connection for long and delay other streams.
	ChunkSize = 64 << 10
	// InitialWindow is the per-stream, per-direction flow-control window.
	InitialWindow = 1 << 20
	// FrameOverhead is the flow-control cost of a data frame on top of the bytes it carries.
	FrameOverhead = 256
	// MaxQueuedEvents bounds the events a client may have to buffer on one stream: at most two per data
	// frame the window allows, plus a few.
	MaxQueuedEvents = 2*(InitialWindow/FrameOverhead) + 16
	// WindowUpdateThreshold is how many consumed bytes a receiver lets accumulate before returning them
	// to the sender in one TypeWindow frame.
	WindowUpdateThreshold = InitialWindow / 4
)

// Type is a frame type.
type Type uint8

// Frame types.
const (
	TypeRequest  Type = 1 // client → daemon: opens a stream; JSON Request
	TypeResponse Type = 2 // daemon → client: ends a stream; JSON Response
	TypeData     Type = 3 // both: channel byte, uint64 offset, raw bytes
	TypeEvent    Type = 4 // daemon → client: JSON Event
	TypeCancel   Type = 5 // client → daemon: abort the call (detach for attach streams); empty
	TypeClose    Type = 6 // client → daemon: end of the client's data (EOF on stdin or upload); empty
	TypeWindow   Type = 7 // both: flow-control credit; uint32 big-endian increment
	// TypeGoAway comes from a node's multiplexer (link.Mux), or from a microVM's daemon over a channel
	// that cannot show a close (a virtio-serial port): the connection is closing and every stream with
	// an id after the uint32 big-endian one in the payload (0: none) never reached the daemon, so those
	// calls may be sent again on a new connection. Its stream id is 0, the connection's own.
	TypeGoAway Type = 8
)

var typeNames = [...]string{
	TypeRequest:  "request",
	TypeResponse: "response",
	TypeData:     "data",
	TypeEvent:    "event",
	TypeCancel:   "cancel",
	TypeClose:    "close",
	TypeWindow:   "window",
	TypeGoAway:   "goaway",
}

// String reports the lower-case name of t ("request", "data", …) or "type(N)" for an unknown type.
func (t Type) String() string {
	if t.Valid() {
		return typeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Valid reports whether t is a known frame type.
func (t Type) Valid() bool { return t >= TypeRequest && t <= TypeGoAway }

// Frame is one decoded frame.
type Frame struct {
	Type    Type
	Stream  uint32
	Payload []byte
}

// Errors reported by ReadFrame and the payload decoders. They wrap errdefs sentinels.
var (
	ErrFrameTooLarge = fmt.Errorf("frame payload exceeds %d bytes: %w", MaxPayload, errdefs.ErrTooLarge)
	ErrBadFrame      = fmt.Errorf("malformed frame: %w", errdefs.ErrInvalidArgument)
)

// ReadFrame reads one frame from r. It reports io.EOF when r ends cleanly before a frame,
// io.ErrUnexpectedEOF when it ends inside one, ErrFrameTooLarge for a length above MaxPayload (checked
// before any allocation) and ErrBadFrame for an unknown type, or a stream id 0 on any frame but
// TypeGoAway (whose id must be 0).
// The returned payload is freshly allocated and owned by the caller.
func ReadFrame(r io.Reader) (Frame, error) {
	return ReadFrameBuf(r, nil)
}

// ReadFrameBuf is ReadFrame with the payload buffer obtained from alloc(n), which must return a slice of
// length n (n is at most MaxPayload). A nil alloc allocates.
func ReadFrameBuf(r io.Reader, alloc func(n int) []byte) (Frame, error) {
	var hdr [HeaderSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return Frame{}, err
	}
	n := binary.BigEndian.Uint32(hdr[0:4])
	f := Frame{Type: Type(hdr[4]), Stream: binary.BigEndian.Uint32(hdr[5:9])}
	if n > MaxPayload {
		return Frame{}, fmt.Errorf("read frame (%d bytes): %w", n, ErrFrameTooLarge)
	}
	if !f.Type.Valid() {
		return Frame{}, fmt.Errorf("read frame: unknown type %d: %w", hdr[4], ErrBadFrame)
	}
	if (f.Stream == 0) != (f.Type == TypeGoAway) {
		return Frame{}, fmt.Errorf("read frame: %s on stream id %d: %w", f.Type, f.Stream, ErrBadFrame)
	}
	if n > 0 {
		if alloc != nil {
			f.Payload = alloc(int(n))[:n]
		} else {
			f.Payload = make([]byte, n)
		}
		if _, err := io.ReadFull(r, f.Payload); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return Frame{}, err
		}
	}
	return f, nil
}

// AppendFrame appends the encoding of f to dst. It reports ErrFrameTooLarge if the payload is too large.
func AppendFrame(dst []byte, f Frame) ([]byte, error) {
	if len(f.Payload) > MaxPayload {
		return dst, ErrFrameTooLarge
	}
	dst = appendHeader(dst, f.Type, f.Stream, len(f.Payload))
	return append(dst, f.Payload...), nil
}

func appendHeader(dst []byte, t Type, stream uint32, n int) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(n))
	dst = append(dst, byte(t))
	return binary.BigEndian.AppendUint32(dst, stream)
}

// smallFrame is the payload size up to which WriteFrame copies the payload next to the header so the
// frame goes out in one write without a vectored write.
const smallFrame = 4 << 10

// WriteFrame writes f to w as one write call (a vectored write for large payloads on a net.Conn).
// It reports ErrFrameTooLarge for an oversized payload. It is not safe for concurrent use on one w.
func WriteFrame(w io.Writer, f Frame) error {
	if len(f.Payload) > MaxPayload {
		return ErrFrameTooLarge
	}
	if len(f.Payload) <= smallFrame {
		buf := make([]byte, 0, HeaderSize+len(f.Payload))
		buf = appendHeader(buf, f.Type, f.Stream, len(f.Payload))
		buf = append(buf, f.Payload...)
		_, err := w.Write(buf)
		return err
	}
	hdr := appendHeader(make([]byte, 0, HeaderSize), f.Type, f.Stream, len(f.Payload))
	bufs := net.Buffers{hdr, f.Payload}
	_, err := bufs.WriteTo(w)
	return err
}

// Channel names the byte stream a data frame belongs to.
type Channel uint8

// Data channels. File contents and tar archives travel on ChannelStdin (to the sandbox) and
// ChannelStdout (from the sandbox).
const (
	ChannelStdin  Channel = 0
	ChannelStdout Channel = 1
	ChannelStderr Channel = 2
)

// String reports "stdin", "stdout", "stderr" or "channel(N)".
func (c Channel) String() string {
	switch c {
	case ChannelStdin:
		return "stdin"
	case ChannelStdout:
		return "stdout"
	case ChannelStderr:
		return "stderr"
	}
	return fmt.Sprintf("channel(%d)", uint8(c))
}

// MarshalText encodes c as its name.
func (c Channel) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText decodes a channel name.
func (c *Channel) UnmarshalText(b []byte) error {
	switch string(b) {
	case "stdin":
		*c = ChannelStdin
	case "stdout":
		*c = ChannelStdout
	case "stderr":
		*c = ChannelStderr
	default:
		return fmt.Errorf("unknown channel %q: %w", b, errdefs.ErrInvalidArgument)
	}
	return nil
}

// Data is a decoded data payload.
type Data struct {
	Channel Channel
	// Offset is the position of Bytes[0] in the channel's byte stream. For process output it lets a client
	// resume exactly where it stopped (see AttachRequest).
	Offset int64
	Bytes  []byte
}

// AppendData appends a data payload to dst. b must be at most MaxDataChunk bytes for the result to fit
// in a frame.
func AppendData(dst []byte, ch Channel, off int64, b []byte) []byte {
	dst = append(dst, byte(ch))
	dst = binary.BigEndian.AppendUint64(dst, uint64(off))
	return append(dst, b...)
}

// DecodeData decodes a data payload. Bytes aliases p.
func DecodeData(p []byte) (Data, error) {
	if len(p) < DataHeaderSize {
		return Data{}, fmt.Errorf("data payload of %d bytes: %w", len(p), ErrBadFrame)
	}
	ch := Channel(p[0])
	if ch > ChannelStderr {
		return Data{}, fmt.Errorf("data payload: unknown channel %d: %w", p[0], ErrBadFrame)
	}
	off := binary.BigEndian.Uint64(p[1:9])
	if off > 1<<62 {
		return Data{}, fmt.Errorf("data payload: offset %d out of range: %w", off, ErrBadFrame)
	}
	return Data{Channel: ch, Offset: int64(off), Bytes: p[DataHeaderSize:]}, nil
}

// EncodeWindow encodes a window increment payload.
func EncodeWindow(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }

// EncodeGoAway encodes a go-away payload: the last stream id of the client's that reached the daemon.
func EncodeGoAway(last uint32) []byte { return binary.BigEndian.AppendUint32(nil, last) }

// DecodeGoAway decodes a go-away payload.
func DecodeGoAway(p []byte) (uint32, error) {
	if len(p) != 4 {
		return 0, fmt.Errorf("goaway payload of %d bytes: %w", len(p), ErrBadFrame)
	}
	return binary.BigEndian.Uint32(p), nil
}

// DecodeWindow decodes a window increment payload; the increment must be positive and at most
// InitialWindow.
func DecodeWindow(p []byte) (uint32, error) {
	if len(p) != 4 {
		return 0, fmt.Errorf("window payload of %d bytes: %w", len(p), ErrBadFrame)
	}
	n := binary.BigEndian.Uint32(p)
	if n == 0 || n > InitialWindow {
		return 0, fmt.Errorf("window increment %d: %w", n, ErrBadFrame)
	}
	return n, nil
}

// BufSize is the size of the buffers BufPool hands out: one data frame payload of ChunkSize bytes.
const BufSize = DataHeaderSize + ChunkSize

// BufPool recycles data frame buffers, so that streaming does not allocate (and page-fault) a fresh
// 64 KiB buffer per frame. It is safe for concurrent use.
type BufPool struct{ p sync.Pool }

// Get returns a buffer of length n: pooled if smallFrame < n <= BufSize, else freshly allocated
// (small buffers are cheaper to allocate than to take a whole pooled buffer for).
func (bp *BufPool) Get(n int) []byte {
	if n <= smallFrame || n > BufSize {
		return make([]byte, n)
	}
	if b, ok := bp.p.Get().(*[]byte); ok {
		return (*b)[:n]
	}
	return make([]byte, n, BufSize)
}

// Put recycles b, which the caller must no longer use. Buffers not from Get are dropped.
func (bp *BufPool) Put(b []byte) {
	if cap(b) != BufSize {
		return
	}
	b = b[:0]
	bp.p.Put(&b)
}
