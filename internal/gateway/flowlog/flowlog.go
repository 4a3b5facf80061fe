// Package flowlog keeps the network gateway's flow records: each sandbox's flows appended as JSON lines
// to a file of its own, which outlives the sandbox, and read back newest first through a Filter. Metrics
// (metrics.go) counts them for Prometheus.
//
// A sandbox's file is DIR/<sandbox-id>.jsonl, mode 0600, one gateway.Flow a line, in the order the flows
// ended. Readers take the file as it is when they open it and never see a line being written. With the
// sandbox's key set (SetKey: its tenant's flow key, which the control plane derives from the tenant's
// key), each line is the flow sealed under it instead ({"sealed": base64}), so that a revoked tenant
// key leaves the sandbox's destinations, methods and paths unreadable; reads open them with the key the
// filter brings.
package flowlog

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/gateway"
)

// Limits of a read.
const (
	// DefaultLimit is how many flows a read returns when Filter.Limit is 0.
	DefaultLimit = 100
	// MaxLimit is the most flows one read returns.
	MaxLimit = 1000
	// maxLine is the longest line a reader accepts; longer ones (none a gateway writes) are skipped.
	maxLine = 1 << 20
	// chunk is how much a reader reads at a time, from the end of the file backwards.
	chunk = 64 << 10
	// maxOpen bounds the files a Log keeps open for appending.
	maxOpen = 256
)

// Filter selects flows. The zero value selects the newest DefaultLimit flows.
type Filter struct {
	// Decision keeps flows with this decision (gateway.DecisionAllow or DecisionDeny); "" keeps both.
	Decision string
	// Host keeps flows whose destination name or IP is exactly Host (names compare case-insensitively).
	Host string
	// HostContains keeps flows whose destination name contains HostContains, case-insensitively.
	HostContains string
	// Since keeps flows that ended at or after Since; zero: no bound.
	Since time.Time
	// Until keeps flows that started before Until; zero: no bound.
	Until time.Time
	// Limit is the most flows returned, 1 to MaxLimit; 0 is DefaultLimit.
	Limit int
	// Key opens the sandbox's sealed flows (KeySize bytes, its tenant's flow key). A read of a file that
	// holds sealed flows without it fails with errdefs.ErrKeyUnavailable.
	Key []byte `json:"key,omitempty"`
}

// KeySize is the size of a flow key (AES-256).
const KeySize = 32

// Validate reports an error wrapping errdefs.ErrInvalidArgument if f is not a valid filter.
func (f Filter) Validate() error {
	if f.Decision != "" && f.Decision != gateway.DecisionAllow && f.Decision != gateway.DecisionDeny {
		return fmt.Errorf("decision %q: want %q or %q: %w", f.Decision, gateway.DecisionAllow, gateway.DecisionDeny, errdefs.ErrInvalidArgument)
	}
	if f.Limit < 0 || f.Limit > MaxLimit {
		return fmt.Errorf("limit %d: want 1 to %d: %w", f.Limit, MaxLimit, errdefs.ErrInvalidArgument)
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return fmt.Errorf("since must be before until: %w", errdefs.ErrInvalidArgument)
	}
	if len(f.Host) > 255 || len(f.HostContains) > 255 {
		return fmt.Errorf("host filters are at most 255 bytes: %w", errdefs.ErrInvalidArgument)
	}
	if f.Key != nil && len(f.Key) != KeySize {
		return fmt.Errorf("a flow key has %d bytes: %w", KeySize, errdefs.ErrInvalidArgument)
	}
	return nil
}

// match reports whether fl passes f. host is f.Host lower-cased, ip its parse (if it is an address),
// contains f.HostContains lower-cased.
func (f Filter) match(fl *gateway.Flow, host string, ip netip.Addr, contains string) bool {
	if f.Decision != "" && fl.Decision != f.Decision {
		return false
	}
	if host != "" && strings.ToLower(fl.Host) != host && !(ip.IsValid() && fl.DstIP == ip) {
		return false
	}
	if contains != "" && !strings.Contains(strings.ToLower(fl.Host), contains) {
		return false
	}
	if !f.Since.IsZero() && fl.End.Before(f.Since) {
		return false
	}
	if !f.Until.IsZero() && !fl.Start.Before(f.Until) {
		return false
	}
	return true
}

// Log appends flows to per-sandbox files and reads them back. It is a gateway.FlowSink. It is safe for
// concurrent use; Close it after the gateway that records into it.
type Log struct {
	dir string
	log *slog.Logger

	// maxBytes is the size past which a sandbox's file is rotated (see Record).
	maxBytes int64

	mu sync.Mutex
	// open holds the files appended to lately, by sandbox ID, at most maxOpen; guarded by mu.
	open map[string]*openFile
	// keys seal the flows of the sandboxes that have one (SetKey), by sandbox ID; guarded by mu.
	keys map[string]cipher.AEAD
	// keyGrace is how long Forget keeps a sandbox's key.
	keyGrace time.Duration
	// keep is how long the flows of sandboxes without a retention of their own are kept (0: forever;
	// retention.go); guarded by mu.
	keep time.Duration
	// closed is set by Close; guarded by mu.
	closed bool
	// lastErr is when a write error was last logged, to log at most one a minute; guarded by mu.
	lastErr time.Time
}

// Open returns a Log keeping its files in dir, which it creates (0700) if needed. log receives write
// errors; nil is slog.Default().
func Open(dir string, log *slog.Logger) (*Log, error) {
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("flow log: %w", err)
	}
	return &Log{dir: dir, log: log.With("component", "flowlog"), open: map[string]*openFile{}, keys: map[string]cipher.AEAD{},
		keyGrace: time.Minute, maxBytes: DefaultMaxFileBytes}, nil
}

// SetKey makes Record seal sandbox id's flows under key (KeySize bytes) from now on, until Forget.
func (l *Log) SetKey(id string, key []byte) error {
	aead, err := newAEAD(key)
	if err != nil {
		return fmt.Errorf("flow log of %s: %w", id, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.keys[id] = aead
	return nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("a flow key has %d bytes: %w", KeySize, errdefs.ErrInvalidArgument)
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// sealedLine is a line of a sealed flow: the flow's JSON, sealed under the sandbox's key with the
// sandbox's ID as additional data (a nonce, then the ciphertext).
type sealedLine struct {
	Sealed []byte `json:"sealed"`
}

func seal(aead cipher.AEAD, id string, flow []byte) ([]byte, error) {
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(flow)+aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return json.Marshal(sealedLine{Sealed: aead.Seal(nonce, nonce, flow, []byte(id))})
}

func open(aead cipher.AEAD, id string, sealed []byte) ([]byte, error) {
	n := aead.NonceSize()
	if len(sealed) < n {
		return nil, errors.New("sealed flow too short")
	}
	return aead.Open(nil, sealed[:n], sealed[n:], []byte(id))
}

// DefaultMaxFileBytes is the size past which a sandbox's flow file is rotated: a sandbox's flows take
// at most about twice this on disk, however much it connects.
const DefaultMaxFileBytes = 32 << 20

// SetMaxFileBytes sets the rotation size (tests); call it before the first Record.
func (l *Log) SetMaxFileBytes(n int64) { l.maxBytes = n }

// openFile is a sandbox's flow file open for appending, with its size.
type openFile struct {
	f    *os.File
	size int64
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// Path is the file of sandbox id's flows. It reports an invalid-argument error for an ID that is not a
// plain file name.
func (l *Log) Path(id string) (string, error) {
	if !idPattern.MatchString(id) || strings.Contains(id, "..") {
		return "", fmt.Errorf("flow log: sandbox id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	return filepath.Join(l.dir, id+".jsonl"), nil
}

// Record appends f to its sandbox's file as one line. Errors are logged (at most once a minute) and the
// flow is dropped: Record never blocks the connection that ended. A file past the rotation size
// (DefaultMaxFileBytes) becomes ID.jsonl.1, replacing the one before, and a new file starts: Read reads
// both, so the newest flows are always there, and a noisy sandbox's take bounded room.
func (l *Log) Record(f gateway.Flow) {
	line, err := json.Marshal(f)
	if err != nil {
		l.fail(f.SandboxID, fmt.Errorf("encode flow: %w", err))
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	if aead := l.keys[f.SandboxID]; aead != nil {
		if line, err = seal(aead, f.SandboxID, line); err != nil {
			l.failLocked(f.SandboxID, fmt.Errorf("seal flow: %w", err))
			return
		}
	}
	line = append(line, '\n')
	file, err := l.fileLocked(f.SandboxID)
	if err == nil {
		var n int
		n, err = file.f.Write(line)
		file.size += int64(n)
	}
	if err != nil {
		l.failLocked(f.SandboxID, err)
		return
	}
	if file.size >= l.maxBytes {
		l.rotateLocked(f.SandboxID, file)
	}
}

// rotateLocked makes sandbox id's file its older one (ID.jsonl.1, replacing the one before); the next
// Record starts a new file. l.mu is held.
func (l *Log) rotateLocked(id string, file *openFile) {
	file.f.Close()
	delete(l.open, id)
	path, _ := l.Path(id)
	if err := os.Rename(path, path+".1"); err != nil {
		l.failLocked(id, fmt.Errorf("rotate flow log: %w", err))
	}
}

// fileLocked returns the open file of sandbox id, opening it (and closing another when maxOpen are open).
// A file whose last line was cut short (a crash while writing) gets the newline it lacks, so that the
// next line stays whole. l.mu is held.
func (l *Log) fileLocked(id string) (*openFile, error) {
	if f := l.open[id]; f != nil {
		return f, nil
	}
	path, err := l.Path(id)
	if err != nil {
		return nil, err
	}
	if len(l.open) >= maxOpen {
		for k, f := range l.open {
			f.f.Close()
			delete(l.open, k)
			break
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open flow log: %w", err)
	}
	of := &openFile{f: f}
	if fi, err := f.Stat(); err == nil && fi.Size() > 0 {
		of.size = fi.Size()
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, fi.Size()-1); err == nil && last[0] != '\n' {
			if n, err := f.Write([]byte{'\n'}); err == nil {
				of.size += int64(n)
			}
		}
	}
	l.open[id] = of
	return of, nil
}

func (l *Log) fail(id string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failLocked(id, err)
}

func (l *Log) failLocked(id string, err error) {
	if now := time.Now(); now.Sub(l.lastErr) >= time.Minute {
		l.lastErr = now
		l.log.Error("flow not recorded (further errors within a minute are not logged)", "sandbox", id, "err", err)
	}
}

// Forget closes the file of sandbox id if it is open, and drops its key a little later (keyGrace: the
// flows of its last connections are still sealed); a later Record opens the file again. The node calls
// it once the sandbox is gone.
func (l *Log) Forget(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if aead := l.keys[id]; aead != nil {
		// The connections that end as the sandbox goes still have their flows sealed.
		time.AfterFunc(l.keyGrace, func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.keys[id] == aead {
				delete(l.keys, id)
			}
		})
	}
	if f := l.open[id]; f != nil {
		f.f.Close()
		delete(l.open, id)
	}
}

// Close closes the open files; later Records are dropped. Reads still work.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	var errs []error
	for id, f := range l.open {
		if err := f.f.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close flow log of %s: %w", id, err))
		}
		delete(l.open, id)
	}
	return errors.Join(errs...)
}

// Read returns sandbox id's flows that f selects, newest first (in the reverse of the order they ended),
// at most f.Limit of them. A sandbox without flows (or without a file) has none: the result is empty,
// not an error. Lines that do not decode are skipped. Read sees the file as it was when Read opened it;
// it reads from the end backwards and stops once it has f.Limit flows. ctx bounds a long scan.
func (l *Log) Read(ctx context.Context, id string, f Filter) ([]gateway.Flow, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	path, err := l.Path(id)
	if err != nil {
		return nil, err
	}
	limit := f.Limit
	if limit == 0 {
		limit = DefaultLimit
	}
	host := strings.ToLower(strings.TrimSuffix(f.Host, "."))
	ip, _ := netip.ParseAddr(f.Host)
	contains := strings.ToLower(f.HostContains)
	var aead cipher.AEAD
	if f.Key != nil {
		if aead, err = newAEAD(f.Key); err != nil {
			return nil, err
		}
	}
	out := []gateway.Flow{}
	lines, locked := 0, false
	// The current file, then the rotated one: newest first throughout.
	for _, p := range []string{path, path + ".1"} {
		if len(out) >= limit {
			break
		}
		file, err := os.Open(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read flow log of %s: %w", id, err)
		}
		fi, err := file.Stat()
		if err != nil {
			file.Close()
			return nil, fmt.Errorf("read flow log of %s: %w", id, err)
		}
		err = scanBackward(file, fi.Size(), chunk, maxLine, func(line []byte) bool {
			if lines++; lines%4096 == 0 && ctx.Err() != nil {
				return false
			}
			if bytes.HasPrefix(line, []byte(`{"sealed":`)) {
				var sl sealedLine
				if json.Unmarshal(line, &sl) != nil {
					return true
				}
				if aead == nil {
					locked = true
					return false
				}
				var err error
				if line, err = open(aead, id, sl.Sealed); err != nil {
					return true // not this sandbox's, or damaged: skipped as a line that does not decode
				}
			}
			var fl gateway.Flow
			if json.Unmarshal(line, &fl) != nil || fl.SandboxID != id {
				return true
			}
			if f.match(&fl, host, ip, contains) {
				out = append(out, fl)
			}
			return len(out) < limit
		})
		file.Close()
		if err != nil {
			return nil, fmt.Errorf("read flow log of %s: %w", id, err)
		}
		if locked {
			return nil, fmt.Errorf("the flows of %s are sealed under its tenant's key, which is not available: %w", id, errdefs.ErrKeyUnavailable)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("read flow log of %s: %w", id, err)
	}
	return out, nil
}

// scanBackward calls fn with each complete line of r's first size bytes, last line first, without its
// newline, until fn returns false; it reads chunkSize bytes at a time. A last line without a newline
// (still being written) is not complete and is skipped, and so are empty lines and lines longer than
// maxLen. fn must not keep line.
func scanBackward(r io.ReaderAt, size int64, chunkSize, maxLen int, fn func(line []byte) bool) error {
	buf := make([]byte, 0, chunkSize)
	// tail holds the bytes after the last newline seen so far (a line's end whose start lies before).
	var tail []byte
	first := true // the bytes after the file's last newline are not a complete line
	skipping := false
	for off := size; off > 0; {
		n := int64(chunkSize)
		if n > off {
			n = off
		}
		off -= n
		buf = buf[:n]
		if _, err := r.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		data := buf
		for {
			i := bytes.LastIndexByte(data, '\n')
			if i < 0 {
				if !skipping {
					if len(tail)+len(data) > maxLen {
						skipping, tail = true, tail[:0]
					} else {
						tail = append(append(make([]byte, 0, len(data)+len(tail)), data...), tail...)
					}
				}
				break
			}
			line := data[i+1:]
			if !skipping && len(tail) > 0 {
				line = append(append(make([]byte, 0, len(line)+len(tail)), line...), tail...)
			}
			complete := !first && !skipping
			first, skipping, tail = false, false, tail[:0]
			if complete && len(line) > 0 && len(line) <= maxLen {
				if !fn(line) {
					return nil
				}
			}
			data = data[:i]
		}
	}
	if !first && !skipping && len(tail) > 0 && len(tail) <= maxLen {
		fn(tail)
	}
	return nil
}
