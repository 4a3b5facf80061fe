package runc_test

import (
	"os"
	"os/exec"
	"syscall"
)

func execHost(script string) ([]byte, error) {
	return exec.Command("sh", "-c", script).CombinedOutput()
}

func fileUID(fi os.FileInfo) uint32 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Uid
	}
	return 1<<32 - 1
}
