package auditship

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// Writer is a Sink that writes the entries' lines to W (standard output), a batch in one Write.
type Writer struct{ W io.Writer }

// Ship implements Sink.
func (w Writer) Ship(_ context.Context, entries []Entry) error {
	if _, err := w.W.Write(joinLines(entries)); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}

// Close implements Sink; it does not close W.
func (Writer) Close() error { return nil }

func joinLines(entries []Entry) []byte {
	n := 0
	for _, e := range entries {
		n += len(e.Line) + 1
	}
	b := make([]byte, 0, n)
	for _, e := range entries {
		b = append(append(b, e.Line...), '\n')
	}
	return b
}

// File is a Sink that appends the entries' lines to a file: the export's format, so that
// `airlock audit verify FILE` checks what was shipped. It is a Holder: it knows the last entry in the
// file, and so a shipper started again (after a crash between a write and its state file's update,
// or with no state file) appends only what the file lacks. The file is locked (flock) while open: a
// second shipper to it fails rather than interleaving lines.
type File struct {
	path    string
	f       *os.File
	regular bool
	// size is the regular file's size: a failed write is cut back to it.
	size int64
	// last is the file's last entry (nil if none).
	last *Entry
}

var (
	_ Sink   = (*File)(nil)
	_ Holder = (*File)(nil)
)

// entryStart is how the server's JSON of an entry begins: a last line that begins so and lacks its
// newline is a write a crash cut short, and OpenFile cuts it off.
var entryStart = []byte(`{"tenant":`)

// OpenFile opens (creating it 0600) the file at path for appending. A regular file must be empty or
// end in an entry of the log; if a crash cut its last line short, that line is removed (and logged).
// Anything else at path (a FIFO, /dev/stderr) is written as it is.
func OpenFile(path string, log *slog.Logger) (_ *File, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
		}
	}()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	s := &File{path: path, f: f, regular: fi.Mode().IsRegular()}
	if !s.regular {
		return s, nil
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s is being written by another shipper: %w", path, errdefs.ErrFailedPrecondition)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	s.size = fi.Size()
	off, line, err := lastLine(f, s.size)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(line) > 0 && line[len(line)-1] != '\n' {
		if !bytes.HasPrefix(line, entryStart) {
			return nil, fmt.Errorf("%s does not end in a newline, nor in an entry a crash cut short; not appending to it: %w", path, errdefs.ErrFailedPrecondition)
		}
		if err := f.Truncate(off); err != nil {
			return nil, fmt.Errorf("cut the incomplete last line of %s: %w", path, err)
		}
		log.Warn("audit shipper: removed the incomplete last line a crash left in the file", "file", path, "bytes", len(line))
		s.size = off
		if _, line, err = lastLine(f, s.size); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	if len(line) > 0 {
		e, err := ParseEntry(line[:len(line)-1])
		if err != nil {
			return nil, fmt.Errorf("%s does not end in an entry of an audit log (%v); not appending to it: %w", path, err, errdefs.ErrFailedPrecondition)
		}
		s.last = &e
	}
	return s, nil
}

// lastLine returns the offset and bytes of the last line of the first size bytes of f, its newline
// included if it has one; nil if size is 0.
func lastLine(f *os.File, size int64) (int64, []byte, error) {
	const chunk = 64 << 10
	var buf []byte
	for pos := size; pos > 0; {
		n := min(chunk, pos)
		pos -= n
		b := make([]byte, n, int(n)+len(buf))
		if _, err := f.ReadAt(b, pos); err != nil {
			return 0, nil, err
		}
		buf = append(b, buf...)
		search := buf
		if buf[len(buf)-1] == '\n' {
			search = buf[:len(buf)-1] // the line's own newline
		}
		if i := bytes.LastIndexByte(search, '\n'); i >= 0 {
			return pos + int64(i) + 1, buf[i+1:], nil
		}
		if len(buf) > MaxLine+1 {
			return 0, nil, fmt.Errorf("the last line is longer than %d bytes", MaxLine)
		}
	}
	return 0, buf, nil
}

// Holds implements Holder: the file's last entry.
func (s *File) Holds(_ context.Context, tenant string) (int64, string, error) {
	if s.last == nil {
		return 0, "", nil
	}
	if s.last.Tenant != tenant {
		return 0, "", Permanent(fmt.Errorf("%s holds tenant %q's audit log; not appending tenant %q's: %w", s.path, s.last.Tenant, tenant, errdefs.ErrFailedPrecondition))
	}
	return s.last.Seq, s.last.Hash, nil
}

// Ship implements Sink: one append, then fsync. A failed append is cut off again, so the file never
// holds part of a batch.
func (s *File) Ship(_ context.Context, entries []Entry) error {
	b := joinLines(entries)
	_, err := s.f.Write(b)
	if err == nil && s.regular {
		err = s.f.Sync()
	}
	if err != nil {
		if s.regular {
			_ = s.f.Truncate(s.size)
		}
		return fmt.Errorf("append to %s: %w", s.path, err)
	}
	s.size += int64(len(b))
	e := entries[len(entries)-1]
	s.last = &e
	return nil
}

// Close implements Sink: it closes the file (and so unlocks it).
func (s *File) Close() error { return s.f.Close() }
