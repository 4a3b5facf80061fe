package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// fakeFiles is a hand-written stand-in for the API's file routes, in process (an http.RoundTripper),
// so that it can count exactly what the client read. Its file is what a hostile sandbox shows: stat
// reports statSize bytes, then the read gets size bytes ('x'), or content when set.
type fakeFiles struct {
	statSize int64
	size     int64
	content  string
	entries  int          // entries of a listed directory
	read     atomic.Int64 // bytes of the file read by the client
}

func (f *fakeFiles) RoundTrip(r *http.Request) (*http.Response, error) {
	resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Request: r}
	switch {
	case strings.HasSuffix(r.URL.Path, "/files/stat"):
		resp.Body = io.NopCloser(strings.NewReader(fmt.Sprintf(`{"name":"f","path":"/f","type":"file","size":%d,"mode":"0644"}`, f.statSize)))
	case strings.HasSuffix(r.URL.Path, "/files/list"):
		var b strings.Builder
		b.WriteString(`{"entries":[`)
		for i := range f.entries {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `{"name":"f%d","path":"/d/f%d","type":"file","size":1,"mode":"0644"}`, i, i)
		}
		b.WriteString(`]}`)
		resp.Body = io.NopCloser(strings.NewReader(b.String()))
	case strings.HasSuffix(r.URL.Path, "/files"):
		if f.content != "" {
			resp.Body = io.NopCloser(strings.NewReader(f.content))
			break
		}
		resp.Body = &growing{size: f.size, read: &f.read}
	default:
		resp.StatusCode = http.StatusNotFound
		resp.Body = io.NopCloser(strings.NewReader(`{"error":{"code":"not_found","message":"no route"}}`))
	}
	return resp, nil
}

// growing is a body of size bytes ('x') made as it is read, counting what was read.
type growing struct {
	size int64
	read *atomic.Int64
}

func (g *growing) Read(p []byte) (int, error) {
	left := g.size - g.read.Load()
	if left <= 0 {
		return 0, io.EOF
	}
	n := min(int64(len(p)), left)
	for i := range p[:n] {
		p[i] = 'x'
	}
	g.read.Add(n)
	return int(n), nil
}

func (g *growing) Close() error { return nil }

// session connects an MCP client to New over a client of the fake.
func session(t *testing.T, f *fakeFiles) *mcp.ClientSession {
	t.Helper()
	c := airlock.New("http://airlock.invalid", airlock.WithHTTPClient(&http.Client{Transport: f}))
	st, ct := mcp.NewInMemoryTransports()
	ss, err := New(c, "test").Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls a tool and returns its structured result (as JSON) or its error text.
func call(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) (out []byte, errText string) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if res.IsError {
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				errText += tc.Text
			}
		}
		return nil, errText
	}
	out, err = json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	return out, ""
}

// TestReadFileBoundedWhileReading: read_file holds at most MaxFileBytes of a file whatever a stat said
// of it (the sandbox grows it between the stat and the read), reads at most one byte past it, and says
// so; a file within the bound comes back whole, as text or base64.
func TestReadFileBoundedWhileReading(t *testing.T) {
	tests := []struct {
		name     string
		f        *fakeFiles
		wantErr  string
		wantFile FileOut
	}{
		{name: "grown after stat", f: &fakeFiles{statSize: 10, size: 16 * MaxFileBytes},
			wantErr: fmt.Sprintf("/f is larger than %d bytes; read_file returns at most %d", MaxFileBytes, MaxFileBytes)},
		{name: "one past the bound", f: &fakeFiles{statSize: MaxFileBytes + 1, size: MaxFileBytes + 1},
			wantErr: fmt.Sprintf("read_file returns at most %d", MaxFileBytes)},
		{name: "at the bound", f: &fakeFiles{statSize: MaxFileBytes, size: MaxFileBytes},
			wantFile: FileOut{Path: "/f", Size: MaxFileBytes, Encoding: "utf-8", Content: strings.Repeat("x", MaxFileBytes)}},
		{name: "text", f: &fakeFiles{statSize: 6, content: "hello\n"},
			wantFile: FileOut{Path: "/f", Size: 6, Encoding: "utf-8", Content: "hello\n"}},
		{name: "binary", f: &fakeFiles{statSize: 3, content: "\xff\x00\xfe"},
			wantFile: FileOut{Path: "/f", Size: 3, Encoding: "base64", Content: "/wD+"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := session(t, tt.f)
			out, errText := call(t, cs, "read_file", map[string]any{"id": "sb_abcdefghijklmnopqrstuvwxyz", "path": "/f"})
			if got := tt.f.read.Load(); got > MaxFileBytes+1 {
				t.Errorf("read %d bytes of the file; want at most %d", got, MaxFileBytes+1)
			}
			if tt.wantErr != "" {
				if !strings.Contains(errText, tt.wantErr) {
					t.Fatalf("read_file: got error %q (result %d bytes); want an error containing %q", errText, len(out), tt.wantErr)
				}
				return
			}
			if errText != "" {
				t.Fatalf("read_file: %s", errText)
			}
			var got FileOut
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.wantFile, got); diff != "" {
				t.Errorf("read_file (-want +got):\n%s", diff)
			}
		})
	}
}

// TestListFilesBounded: list_files returns at most MaxListEntries entries and says when it left some out.
func TestListFilesBounded(t *testing.T) {
	for _, tt := range []struct {
		entries, want int
		truncated     bool
	}{
		{3, 3, false},
		{MaxListEntries, MaxListEntries, false},
		{MaxListEntries + 1, MaxListEntries, true},
	} {
		t.Run(fmt.Sprint(tt.entries), func(t *testing.T) {
			cs := session(t, &fakeFiles{entries: tt.entries})
			out, errText := call(t, cs, "list_files", map[string]any{"id": "sb_abcdefghijklmnopqrstuvwxyz", "path": "/d"})
			if errText != "" {
				t.Fatalf("list_files: %s", errText)
			}
			var got Entries
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatal(err)
			}
			if len(got.Entries) != tt.want || got.Truncated != tt.truncated {
				t.Errorf("list_files: got %d entries, truncated %v; want %d, %v", len(got.Entries), got.Truncated, tt.want, tt.truncated)
			}
		})
	}
}
