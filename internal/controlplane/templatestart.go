package controlplane

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/template"
)

// A template's start command (nodecontract.Start) comes from its build: --start-cmd and --ready-cmd, or the
// image's labels run.airlock.start-cmd and run.airlock.ready-cmd (shell commands). The build boots the
// image once with it, waits until ready and has the in-process node save a start snapshot; the
// template's record holds the command and the snapshot's key. Every sandbox and session created from
// that version of the template then gets the command running: restored from the snapshot where the
// node holds it and the runtime is the snapshot's, started and waited for otherwise.

// Labels that declare a template's start command.
const (
	StartCmdLabel = "run.airlock.start-cmd"
	ReadyCmdLabel = "run.airlock.ready-cmd"
)

// maxStartTimeout bounds how long a start command may take to be ready.
const maxStartTimeout = 30 * time.Minute

// TemplateStart is a template's start command, as its record holds it.
type TemplateStart struct {
	// Cmd is the start command's argv; ReadyCmd the ready check's (none: ready after a second).
	Cmd      []string `json:"cmd"`
	ReadyCmd []string `json:"ready_cmd,omitempty"`
	// TimeoutSeconds bounds the wait for ready (0: nodecontract.DefaultStartTimeout).
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
	// Key names the start snapshot the build saved on the in-process node, with Runtime.
	Key     string `json:"key,omitempty"`
	Runtime string `json:"runtime,omitempty"`
}

// shellCommand is the argv that runs a shell command line ("" : none).
func shellCommand(line string) []string {
	if strings.TrimSpace(line) == "" {
		return nil
	}
	return []string{"/bin/sh", "-c", line}
}

// startKey names the start snapshot of image digest with start on runtime rt: the image's hex digest
// and 16 hex of the rest.
func startKey(digest string, st TemplateStart, rt string) string {
	st.Key, st.Runtime = "", ""
	b, _ := json.Marshal(st)
	sum := sha256.Sum256(append([]byte(rt+"\x00"), b...))
	return strings.TrimPrefix(digest, "sha256:") + "-" + hex.EncodeToString(sum[:8])
}

// nodeStart is what a create of a sandbox of the template asks its node for: st's command, the key
// of its snapshot if the node is the in-process one and runs rt.
func (s *placer) nodeStart(st *TemplateStart, cwd, rt, nodeID string) *nodecontract.Start {
	if st == nil || len(st.Cmd) == 0 {
		return nil
	}
	ns := &nodecontract.Start{Cmd: st.Cmd, ReadyCmd: st.ReadyCmd, Cwd: cwd, Timeout: time.Duration(st.TimeoutSeconds) * time.Second}
	if st.Key != "" && st.Runtime == rt && s.nodes.isLocal(nodeID) {
		ns.Key = st.Key
	}
	return ns
}

// startFor returns the start command of template ref (NAME@sha256:…, as a sandbox records it), if the
// version it names has one, for a sandbox on node nodeID with runtime rt.
func (s *placer) startFor(ctx context.Context, ref, rt, nodeID string) *nodecontract.Start {
	name, digest, err := template.ParseRef(ref)
	if err != nil || digest == "" {
		return nil
	}
	d, err := s.store.GetDoc(ctx, templateDocPrefix+name)
	if err != nil {
		return nil
	}
	var rec templateDoc
	if json.Unmarshal(d.Value, &rec) != nil || rec.Digest != digest {
		return nil // another version: its start command is not this one's
	}
	return s.nodeStart(rec.Start, rec.Config.WorkingDir, rt, nodeID)
}

// warmTaker is a node that keeps sandboxes restored ahead for the creates of start snapshots (the
// in-process node: node.Local.TakeWarm).
type warmTaker interface {
	TakeWarm(ctx context.Context, req nodecontract.CreateRequest) (string, bool)
}

// newSandboxID names the sandbox of create req (its ID unset) on node n: a sandbox n restored ahead for
// it, if n keeps one (the create must then be of that ID), or a new ID.
func (s *placer) newSandboxID(ctx context.Context, n Node, req nodecontract.CreateRequest) string {
	if w, ok := n.(warmTaker); ok && req.Start != nil && req.Start.Key != "" {
		if id, ok := w.TakeWarm(ctx, req); ok {
			return id
		}
	}
	return store.NewID("sb")
}
