package apiutil

import (
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/airlockrun/airlock/api/wire"
	"github.com/airlockrun/airlock/internal/controlplane"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// SessionIDPattern matches a session's ID (an E2B sandbox's too).
var SessionIDPattern = regexp.MustCompile(`^se_[a-z2-7]{26}$`)

// CheckPath rejects paths that are not absolute, hold a ".." element or a NUL byte.
func CheckPath(p string) error {
	if err := controlplane.CheckPath(p); err != nil {
		return ClientErr(errdefs.ErrInvalidArgument, "path %q: %s", Truncate(p, 256), strings.TrimSuffix(err.Error(), ": "+errdefs.ErrInvalidArgument.Error()))
	}
	return nil
}

// maxExecTimeout bounds a run-to-completion exec's timeout.
const maxExecTimeout = time.Hour

// CheckCommand validates the parts of an exec request shared by every kind of exec.
func CheckCommand(req *wire.ExecRequest) error {
	// No cmd is the template's own command (an image's Entrypoint and Cmd); the sandbox refuses it if
	// its template has none.
	if len(req.Cmd) > 0 && req.Cmd[0] == "" {
		return ClientErr(errdefs.ErrInvalidArgument, "cmd[0] is empty: cmd is the argv of the process, e.g. [\"python3\", \"-c\", \"print(1)\"], or absent for the template's own command")
	}
	if len(req.Cmd) > 4096 {
		return ClientErr(errdefs.ErrInvalidArgument, "cmd has %d arguments; at most 4096 are allowed", len(req.Cmd))
	}
	for k := range req.Env {
		if !ValidEnvName(k) {
			return ClientErr(errdefs.ErrInvalidArgument, "env name %q is not a valid variable name", Truncate(k, 64))
		}
	}
	if req.Cwd != "" {
		if err := CheckPath(req.Cwd); err != nil {
			return err
		}
	}
	if req.TimeoutSeconds < 0 || time.Duration(req.TimeoutSeconds)*time.Second > maxExecTimeout {
		return ClientErr(errdefs.ErrInvalidArgument, "timeout_seconds must be between 0 and %d", int(maxExecTimeout/time.Second))
	}
	return nil
}

// ValidEnvName reports whether k may name an environment variable: letters, digits and _, not starting with a digit.
func ValidEnvName(k string) bool {
	if k == "" {
		return false
	}
	for i, c := range k {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// EnvList is m as a process's environment: KEY=value, sorted.
func EnvList(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
