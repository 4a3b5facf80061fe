package link

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/daemon/proto"
)

// Audit receives a record of every frame that crosses the channel. Implementations must be safe for
// concurrent use and must not block: Record runs on the connection's hot path.
type Audit interface {
	Record(Entry)
}

// Direction says which way a frame went.
type Direction string

// Directions.
const (
	ToSandbox   Direction = "to_sandbox"
	FromSandbox Direction = "from_sandbox"
)

// Entry describes one frame. It never contains file contents, process output or environment values.
type Entry struct {
	Time      time.Time `json:"time"`
	Direction Direction `json:"direction"`
	Stream    uint32    `json:"stream"`
	Type      string    `json:"type"`         // request, response, data, event, cancel, close, window
	Op        string    `json:"op,omitempty"` // the operation of the stream, when known
	Size      int       `json:"size"`         // payload bytes
	// Channel is set for data frames.
	Channel string `json:"channel,omitempty"`
	// Args summarizes a request's arguments, with env values redacted.
	Args any `json:"args,omitempty"`
	// Error is the error code of a failed response.
	Error string `json:"error,omitempty"`
	// Event is the kind of an event frame.
	Event string `json:"event,omitempty"`
}

// record builds an Entry for f and hands it to the audit sink.
func (c *Client) record(dir Direction, f proto.Frame, op proto.Op, args any) {
	recordFrame(c.audit, dir, f, op, args)
}

// recordFrame builds an Entry for f and hands it to a.
func recordFrame(a Audit, dir Direction, f proto.Frame, op proto.Op, args any) {
	e := Entry{
		Time:      time.Now().UTC(),
		Direction: dir,
		Stream:    f.Stream,
		Type:      f.Type.String(),
		Op:        string(op),
		Size:      len(f.Payload),
	}
	switch f.Type {
	case proto.TypeRequest:
		e.Args = summarizeArgs(args)
	case proto.TypeData:
		if len(f.Payload) > 0 {
			e.Channel = proto.Channel(f.Payload[0]).String()
		}
	case proto.TypeResponse:
		var resp struct {
			Error *proto.Error `json:"error"`
		}
		if json.Unmarshal(f.Payload, &resp) == nil && resp.Error != nil {
			e.Error = resp.Error.Code
		}
	case proto.TypeEvent:
		var ev struct {
			Kind string `json:"kind"`
		}
		if json.Unmarshal(f.Payload, &ev) == nil {
			e.Event = ev.Kind
		}
	}
	a.Record(e)
}

// summarizeArgs returns request args fit for the audit log: env values and an identity's secrets
// redacted. Args never carry file contents or stdin (those travel in data frames).
func summarizeArgs(args any) any {
	switch a := args.(type) {
	case *proto.ExecRequest:
		r := *a
		r.Env = proto.RedactEnv(a.Env)
		r.Stdin = nil
		return r
	case proto.ExecRequest:
		return summarizeArgs(&a)
	case *proto.StartRequest:
		r := *a
		r.Env = proto.RedactEnv(a.Env)
		return r
	case proto.StartRequest:
		return summarizeArgs(&a)
	case *proto.IdentityRequest:
		return a.Redacted() // never the seed nor the interpreter key
	case proto.IdentityRequest:
		return a.Redacted()
	}
	return args
}

// FileAudit is an Audit that appends one JSON object per line to a file. It is safe for concurrent use.
// Past MaxFileBytes the file becomes PATH.1 (replacing the one before) and a new one starts, so that a
// sandbox flooding its channel fills bounded room.
type FileAudit struct {
	path string
	mu   sync.Mutex
	f    *os.File // guarded by mu; nil after Close
	size int64    // guarded by mu; the file's size
	err  error    // guarded by mu; the first write error
	max  int64
}

// MaxFileBytes is the size past which a FileAudit rotates its file.
const MaxFileBytes = 64 << 20

// NewFileAudit opens (creating with mode 0600 if needed) the file at path for appending.
func NewFileAudit(path string) (*FileAudit, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open audit log: %w", err)
	}
	a := &FileAudit{path: path, f: f, max: MaxFileBytes}
	if fi, err := f.Stat(); err == nil {
		a.size = fi.Size()
	}
	return a, nil
}

// SetMaxFileBytes sets the rotation size (tests).
func (a *FileAudit) SetMaxFileBytes(n int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.max = n
}

// Record appends e as one line. Write errors are kept and reported by Close.
func (a *FileAudit) Record(e Entry) {
	b, err := json.Marshal(e)
	if err != nil {
		b, _ = json.Marshal(Entry{Time: e.Time, Direction: e.Direction, Stream: e.Stream, Type: e.Type, Op: e.Op, Size: e.Size})
	}
	b = append(b, '\n')
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		return
	}
	n, err := a.f.Write(b)
	a.size += int64(n)
	if err != nil && a.err == nil {
		a.err = fmt.Errorf("write audit log: %w", err)
	}
	if a.size >= a.max {
		a.rotateLocked()
	}
}

// rotateLocked moves the file to PATH.1 and opens a new one. a.mu is held.
func (a *FileAudit) rotateLocked() {
	a.f.Close()
	a.f = nil
	if err := os.Rename(a.path, a.path+".1"); err != nil && a.err == nil {
		a.err = fmt.Errorf("rotate audit log: %w", err)
	}
	f, err := os.OpenFile(a.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		if a.err == nil {
			a.err = fmt.Errorf("open audit log: %w", err)
		}
		return
	}
	a.f, a.size = f, 0
}

// Close closes the file and reports the first write error, if any.
func (a *FileAudit) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		return a.err
	}
	err := a.f.Close()
	a.f = nil
	return errors.Join(a.err, err)
}
