package e2e

import (
	"errors"
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
