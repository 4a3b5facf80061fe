package e2e

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlockrun/airlock/sdk/go/airlock"

	"golang.org/x/sys/unix"
)

type syscallStatfs struct {
	avail uint64
	bsize int64
}

func statfs(t *testing.T, path string, out *syscallStatfs) {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	out.avail, out.bsize = st.Bavail, st.Bsize
}

func asAPIError(err error, target **airlock.APIError) bool { return errors.As(err, target) }

// assertNotInDir fails the test for every regular file under dir that holds one of the needles.
func assertNotInDir(t *testing.T, dir string, needles ...string) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		for _, n := range needles {
			if bytes.Contains(b, []byte(n)) {
				t.Errorf("%s holds a secret in plain text", p)
			}
		}
		return nil
	})
}
