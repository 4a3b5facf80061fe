package airlock

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// growingBody is a response body of size bytes ('x'), made as it is read, that counts what the client
// read: a file a sandbox grows (or made sparse and huge) while it is read. size < 0 never ends.
type growingBody struct {
	size int64
	read *atomic.Int64
}

func (g *growingBody) Read(p []byte) (int, error) {
	n := int64(len(p))
	if g.size >= 0 {
		left := g.size - g.read.Load()
		if left <= 0 {
			return 0, io.EOF
		}
		n = min(n, left)
	}
	for i := range p[:n] {
		p[i] = 'x'
	}
	g.read.Add(n)
	return int(n), nil
}

func (g *growingBody) Close() error { return nil }

// bodyTransport answers every request 200 with a growingBody of size bytes (after prefix, if set), or
// with body when it is set.
type bodyTransport struct {
	size   int64
	body   string
	prefix string
	read   atomic.Int64
}

func (b *bodyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	var body io.ReadCloser = &growingBody{size: b.size, read: &b.read}
	if b.body != "" {
		body = io.NopCloser(strings.NewReader(b.body))
	}
	if b.prefix != "" {
		body = io.NopCloser(io.MultiReader(strings.NewReader(b.prefix), body))
	}
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: body, Request: r}, nil
}

// TestReadBoundedWhileReading: ReadFile, ReadFileLimit and the snapshot reads hold at most their bound
// of a body, however long it grows, and read at most one byte past it; a body within the bound (a file
// as the sandbox left it) comes back whole.
func TestReadBoundedWhileReading(t *testing.T) {
	const bound = 1 << 20
	reads := map[string]func(c *Client) ([]byte, error){
		"ReadFile": func(c *Client) ([]byte, error) { return c.ReadFile(context.Background(), testID, "/f") },
		"ReadFileLimit": func(c *Client) ([]byte, error) {
			return c.ReadFileLimit(context.Background(), testID, "/f", bound)
		},
		"ReadSnapshotFile": func(c *Client) ([]byte, error) {
			return c.ReadSnapshotFile(context.Background(), "se_abcdefghijklmnopqrstuvwxyz", "sn_x", "/f")
		},
		"ReadSnapshotFileLimit": func(c *Client) ([]byte, error) {
			return c.ReadSnapshotFileLimit(context.Background(), "se_abcdefghijklmnopqrstuvwxyz", "sn_x", "/f", bound)
		},
	}
	sizes := []struct {
		name    string
		size    int64
		tooBig  bool
		wantLen int
	}{
		{"empty", 0, false, 0},
		{"small", 100, false, 100},
		{"at the bound", bound, false, bound},
		{"one past", bound + 1, true, 0},
		{"64 times the bound", 64 * bound, true, 0},
		{"never ends", -1, true, 0},
	}
	for name, read := range reads {
		for _, sz := range sizes {
			t.Run(name+"/"+sz.name, func(t *testing.T) {
				tr := &bodyTransport{size: sz.size}
				c := New("http://airlock.invalid", WithHTTPClient(&http.Client{Transport: tr}), WithMaxReadBytes(bound))
				b, err := read(c)
				if got := tr.read.Load(); got > bound+1 {
					t.Errorf("read %d bytes of the body; want at most %d", got, bound+1)
				}
				if sz.tooBig {
					if !errors.Is(err, ErrTooLarge) {
						t.Fatalf("got %d bytes, error %v; want an error matching ErrTooLarge", len(b), err)
					}
					if !strings.Contains(err.Error(), "larger than 1048576 bytes") {
						t.Errorf("error %q does not name the bound", err)
					}
					return
				}
				if err != nil {
					t.Fatalf("got error %v; want %d bytes", err, sz.wantLen)
				}
				if len(b) != sz.wantLen || !bytes.Equal(b, bytes.Repeat([]byte("x"), sz.wantLen)) {
					t.Errorf("got %d bytes; want %d bytes of x", len(b), sz.wantLen)
				}
			})
		}
	}
}

// TestReadFileDefaultBound: a client without WithMaxReadBytes holds at most DefaultMaxReadBytes of a
// file, and WithMaxReadBytes(0) keeps that default.
func TestReadFileDefaultBound(t *testing.T) {
	for _, opts := range [][]Option{nil, {WithMaxReadBytes(0)}} {
		tr := &bodyTransport{size: -1}
		c := New("http://airlock.invalid", append(opts, WithHTTPClient(&http.Client{Transport: tr}))...)
		_, err := c.ReadFile(context.Background(), testID, "/f")
		if !errors.Is(err, ErrTooLarge) {
			t.Fatalf("ReadFile of an endless file: got %v; want an error matching ErrTooLarge", err)
		}
		if got := tr.read.Load(); got != DefaultMaxReadBytes+1 {
			t.Errorf("read %d bytes; want %d", got, DefaultMaxReadBytes+1)
		}
	}
}

// TestReadLimitRefusesNonPositive: a bound of zero or less is the caller's mistake, reported before any
// request.
func TestReadLimitRefusesNonPositive(t *testing.T) {
	tr := &bodyTransport{size: 10}
	c := New("http://airlock.invalid", WithHTTPClient(&http.Client{Transport: tr}))
	for _, max := range []int64{0, -1} {
		if _, err := c.ReadFileLimit(context.Background(), testID, "/f", max); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("ReadFileLimit(max %d): got %v; want an error matching ErrInvalidArgument", max, err)
		}
		if _, err := c.ReadSnapshotFileLimit(context.Background(), "se_x", "sn_x", "/f", max); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("ReadSnapshotFileLimit(max %d): got %v; want an error matching ErrInvalidArgument", max, err)
		}
	}
	if got := tr.read.Load(); got != 0 {
		t.Errorf("read %d bytes; want none", got)
	}
}

// TestJSONBounded: a JSON answer (an exec result, a file list: sandbox data) is read up to the client's
// bound; a larger one is an error matching ErrTooLarge, a smaller one decodes.
func TestJSONBounded(t *testing.T) {
	list := `{"entries":[` + strings.Repeat(`{"name":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"},`, 1000) + `{"name":"z"}]}`
	tests := []struct {
		name   string
		bound  int64
		tooBig bool
	}{
		{"within", int64(len(list)), false},
		{"past", int64(len(list)) - 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := &bodyTransport{body: list}
			c := New("http://airlock.invalid", WithHTTPClient(&http.Client{Transport: tr}), WithMaxReadBytes(tt.bound))
			l, err := c.ListFiles(context.Background(), testID, "/")
			if tt.tooBig {
				if !errors.Is(err, ErrTooLarge) {
					t.Fatalf("ListFiles: got %v; want an error matching ErrTooLarge", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ListFiles: %v", err)
			}
			if len(l.Entries) != 1001 {
				t.Errorf("got %d entries; want 1001", len(l.Entries))
			}
		})
	}
	// An endless answer ends at the bound too.
	tr := &bodyTransport{size: -1, prefix: `{"stdout":"`}
	c := New("http://airlock.invalid", WithHTTPClient(&http.Client{Transport: tr}), WithMaxReadBytes(1<<20))
	if _, err := c.Exec(context.Background(), testID, ExecRequest{Cmd: []string{"true"}}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Exec with an endless answer: got %v; want an error matching ErrTooLarge", err)
	}
	if got := tr.read.Load(); got > 1<<20+1 {
		t.Errorf("read %d bytes; want at most %d", got, 1<<20+1)
	}
}

// TestLimitReader: the reader passes on up to max bytes and then fails, having read one byte more.
func TestLimitReader(t *testing.T) {
	for _, tt := range []struct {
		in      string
		max     int64
		want    string
		tooLong bool
	}{
		{"", 3, "", false},
		{"abc", 3, "abc", false},
		{"abcd", 3, "abc", true},
		{"abcdefgh", 1, "a", true},
	} {
		r := &limitReader{r: strings.NewReader(tt.in), max: tt.max}
		got, err := io.ReadAll(r)
		if string(got) != tt.want || errors.Is(err, ErrTooLarge) != tt.tooLong || (!tt.tooLong && err != nil) {
			t.Errorf("limitReader(%q, %d): got %q, %v; want %q, too large %v", tt.in, tt.max, got, err, tt.want, tt.tooLong)
		}
		if r.read > tt.max+1 {
			t.Errorf("limitReader(%q, %d) read %d bytes; want at most %d", tt.in, tt.max, r.read, tt.max+1)
		}
	}
}
