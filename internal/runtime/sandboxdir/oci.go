package sandboxdir

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/runtime"
)

// IDPattern is what a sandbox ID of a container driver may be (it names files and cgroups).
var IDPattern = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$`)

// OCI runs the commands an OCI runtime's command line shares (runsc and runc: state, list, delete,
// kill, pause, resume), for the drivers built on one.
type OCI struct {
	// Name prefixes errors ("gvisor", "runc").
	Name string
	// Command builds a command of the runtime with its global flags.
	Command func(ctx context.Context, args ...string) *exec.Cmd
}

// Run runs a command and reports its stderr on failure.
func (o OCI) Run(ctx context.Context, args ...string) error {
	var errb bytes.Buffer
	cmd := o.Command(ctx, args...)
	cmd.Stderr = &errb
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %v: %s", o.Name, args[0], err, strings.TrimSpace(errb.String()))
	}
	return nil
}

// State is what the runtime's state command reports of a container.
type State struct {
	Status string `json:"status"`
	Pid    int    `json:"pid"`
}

// notThere reports whether the runtime's stderr says the container does not exist.
func notThere(stderr string) bool {
	return strings.Contains(stderr, "does not exist") || strings.Contains(stderr, "not found")
}

// State reports container id's state; an unknown one is ErrNotFound.
func (o OCI) State(ctx context.Context, id string) (State, error) {
	if !IDPattern.MatchString(id) {
		return State{}, fmt.Errorf("%s: bad sandbox id %q: %w", o.Name, id, errdefs.ErrInvalidArgument)
	}
	var out, errb bytes.Buffer
	cmd := o.Command(ctx, "state", id)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		if notThere(errb.String()) {
			return State{}, fmt.Errorf("%s: sandbox %s: %w", o.Name, id, errdefs.ErrNotFound)
		}
		return State{}, fmt.Errorf("%s: state %s: %v: %s", o.Name, id, err, strings.TrimSpace(errb.String()))
	}
	var st State
	if err := json.Unmarshal(out.Bytes(), &st); err != nil {
		return State{}, fmt.Errorf("%s: state %s: %w", o.Name, id, err)
	}
	return st, nil
}

// Status reports whether container id runs (or is paused), and if not, why it stopped, from cgroup.
// See runtime.Driver.
func (o OCI) Status(ctx context.Context, id, cgroup string) (runtime.Status, error) {
	st, err := o.State(ctx, id)
	if err != nil {
		return runtime.Status{}, err
	}
	alive := st.Pid > 0 && unix.Kill(st.Pid, 0) == nil
	switch {
	case st.Status == "running" && alive:
		return runtime.Status{Running: true}, nil
	case st.Status == "paused" && alive:
		return runtime.Status{Running: true, Paused: true}, nil
	}
	return runtime.Status{Reason: StopReason(cgroup)}, nil
}

// Wait blocks until container id's first process exits, or ctx ends. See runtime.Driver.
func (o OCI) Wait(ctx context.Context, id, cgroup string) (runtime.Status, error) {
	st, err := o.State(ctx, id)
	if err != nil {
		return runtime.Status{}, err
	}
	if (st.Status == "running" || st.Status == "paused") && st.Pid > 0 {
		if err := WaitPID(ctx, st.Pid); err != nil {
			return runtime.Status{}, err
		}
	}
	return runtime.Status{Reason: StopReason(cgroup)}, nil
}

// Delete kills and deletes container id; one that does not exist is no error.
func (o OCI) Delete(ctx context.Context, id string) error {
	var errb bytes.Buffer
	cmd := o.Command(ctx, "delete", "--force", id)
	cmd.Stderr = &errb
	if err := cmd.Run(); err != nil && !notThere(errb.String()) {
		return fmt.Errorf("%s delete %s: %v: %s", o.Name, id, err, strings.TrimSpace(errb.String()))
	}
	return nil
}

// List reports the sandboxes with a directory in dir or a container of the runtime.
func (o OCI) List(ctx context.Context, dir string) ([]string, error) {
	seen := map[string]bool{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: list: %w", o.Name, err)
	}
	for _, e := range entries {
		if IDPattern.MatchString(e.Name()) {
			seen[e.Name()] = true
		}
	}
	var out bytes.Buffer
	cmd := o.Command(ctx, "list", "--quiet")
	cmd.Stdout = &out
	if err := cmd.Run(); err == nil {
		for _, id := range strings.Fields(out.String()) {
			if IDPattern.MatchString(id) {
				seen[id] = true
			}
		}
	}
	ids := make([]string, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	return ids, nil
}
