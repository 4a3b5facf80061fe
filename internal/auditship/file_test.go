package auditship_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/auditship"
	"github.com/airlockrun/airlock/internal/errdefs"
)

func shipToFile(t *testing.T, l *fakeLog, path string, sh auditship.Shipper) (auditship.Stats, error) {
	t.Helper()
	f, err := auditship.OpenFile(path, sh.Log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sh.Source, sh.Sink = l.Source, f
	return sh.Run(context.Background())
}

// TestFileResume: the file is created 0600; a shipper started again without a state file (or with
// one a crash left behind) appends only what the file lacks, so the file stays one export that
// verifies.
func TestFileResume(t *testing.T) {
	l := newFakeLog("tn_a", 5)
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	if st, err := shipToFile(t, l, path, auditship.Shipper{}); err != nil || st.Entries != 5 {
		t.Fatalf("first run: %+v, %v", st, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the file: %v, %v; want mode 0600", fi.Mode(), err)
	}
	l.add(4)
	state := filepath.Join(t.TempDir(), "state")
	if err := auditship.WriteState(state, auditship.State{Tenant: "tn_a", Seq: 2}); err != nil { // behind the file
		t.Fatal(err)
	}
	st, err := shipToFile(t, l, path, auditship.Shipper{StatePath: state})
	if err != nil || st.Entries != 4 || st.First != 6 {
		t.Fatalf("second run: %+v, %v; want entries 6..9 only", st, err)
	}
	got, _ := os.ReadFile(path)
	if !bytes.Equal(got, l.export(0)) {
		t.Errorf("the file:\n%s\nwant the log:\n%s", got, l.export(0))
	}
	if n, _, _ := verify(t, got); n != 9 {
		t.Errorf("the file holds %d entries; want 9", n)
	}
	if st, err := shipToFile(t, l, path, auditship.Shipper{}); err != nil || st.Entries != 0 {
		t.Errorf("a third run with nothing new: %+v, %v; want nothing shipped", st, err)
	}
}

// TestFileTornTail: a last line a crash cut short is removed (and told), and the entry shipped again.
func TestFileTornTail(t *testing.T) {
	l := newFakeLog("tn_a", 6)
	full := l.export(0)
	lines := bytes.SplitAfter(full, []byte("\n"))
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	torn := append(bytes.Join(lines[:3], nil), lines[3][:40]...)
	if err := os.WriteFile(path, torn, 0o600); err != nil {
		t.Fatal(err)
	}
	var logged syncBuf
	st, err := shipToFile(t, l, path, auditship.Shipper{Log: testLog(&logged)})
	if err != nil || st.First != 4 || st.Last != 6 {
		t.Fatalf("ship after a torn line: %+v, %v; want 4..6", st, err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, full) {
		t.Errorf("the file:\n%s\nwant:\n%s", got, full)
	}
	if !strings.Contains(logged.String(), "incomplete last line") {
		t.Errorf("the repair is not told:\n%s", logged.String())
	}
}

// TestFileRefuses: the file sink appends only to a file that is empty or ends in an entry of the
// same tenant's log, and only one shipper at a time.
func TestFileRefuses(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"notes":      "my notes\n",
		"no newline": "my notes",
		"json":       `{"a":1}` + "\n",
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := auditship.OpenFile(path, nil); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Errorf("%s: OpenFile = %v; want it refused", name, err)
		}
		if got, _ := os.ReadFile(path); string(got) != content {
			t.Errorf("%s: the file was changed to %q", name, got)
		}
	}

	path := filepath.Join(dir, "a.jsonl")
	if _, err := shipToFile(t, newFakeLog("tn_a", 2), path, auditship.Shipper{}); err != nil {
		t.Fatal(err)
	}
	_, err := shipToFile(t, newFakeLog("tn_b", 2), path, auditship.Shipper{})
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "tn_a") {
		t.Errorf("tenant b's log into tenant a's file = %v; want it refused", err)
	}

	f, err := auditship.OpenFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := auditship.OpenFile(path, nil); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("a second shipper to one file = %v; want it refused", err)
	}
	f.Close()
	g, err := auditship.OpenFile(path, nil)
	if err != nil {
		t.Errorf("open after the first shipper closed: %v", err)
	} else {
		g.Close()
	}
}
