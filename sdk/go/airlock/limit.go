package airlock

import (
	"fmt"
	"io"
)

// DefaultMaxReadBytes is the most a Client holds in memory of one response (a file ReadFile returns,
// a JSON answer) unless WithMaxReadBytes sets another bound. What a sandbox wrote can be any size, and
// can grow while it is read: the bound applies while reading, never from a size announced beforehand.
// The streaming calls (ReadFileStream, DownloadTar, ExportTemplate) hold nothing and are not bounded.
const DefaultMaxReadBytes = 256 << 20

// WithMaxReadBytes sets the most the client holds in memory of one response: past n bytes, ReadFile,
// ReadSnapshotFile and the JSON calls stop reading and fail with an error matching ErrTooLarge. n <= 0
// keeps DefaultMaxReadBytes.
func WithMaxReadBytes(n int64) Option {
	return func(c *Client) {
		if n > 0 {
			c.maxRead = n
		}
	}
}

// limitReader reads at most max bytes of r and fails with an error matching ErrTooLarge, instead of
// the next byte, if r holds more. It reads at most one byte past max.
type limitReader struct {
	r    io.Reader
	max  int64
	read int64 // bytes read from r so far, at most max+1
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.read > l.max {
		return 0, l.tooLarge()
	}
	if left := l.max + 1 - l.read; int64(len(p)) > left {
		p = p[:left]
	}
	n, err := l.r.Read(p)
	l.read += int64(n)
	if l.read > l.max {
		return n - 1, l.tooLarge()
	}
	return n, err
}

func (l *limitReader) tooLarge() error {
	return fmt.Errorf("larger than %d bytes: %w", l.max, ErrTooLarge)
}

// readAllLimit reads r to its end, or fails with an error matching ErrTooLarge as soon as it holds more
// than max bytes; it never reads more than max+1 bytes of r.
func readAllLimit(r io.Reader, max int64) ([]byte, error) {
	if max <= 0 {
		return nil, fmt.Errorf("a read bound must be positive, not %d: %w", max, ErrInvalidArgument)
	}
	return io.ReadAll(&limitReader{r: r, max: max})
}
