package e2e

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/faultinject"
	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// TestSessionSurvivesCrashes kills the server with SIGKILL at each step of a pause (including the
// upload that completes its snapshot behind it) and of a resume, restarts it, and checks that the
// session is running or paused at a snapshot the restart completes, and that its process goes on with
// its memory either way: no session is lost.
func TestSessionSurvivesCrashes(t *testing.T) {
	testenv.RequireSandboxes(t)
	// The upload runs behind the pause: the server dies while or after the pause answers.
	behind := map[string]bool{"upload-stored": true, "snapshot-complete": true}
	for _, point := range []string{"pause-recorded", "snapshot-checkpointed", "snapshot-saved", "pause-session-paused",
		"upload-stored", "snapshot-complete", "resume-fetched", "resume-booted"} {
		t.Run(point, func(t *testing.T) {
			dir, err := os.MkdirTemp("", "airlock-crash-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			addr := freeAddr(t)
			srv := startServer(t, dir, addr)
			t.Cleanup(func() { os.Remove(testenv.KeyFile(dir)) })
			key, err := os.ReadFile(testenv.KeyFile(dir))
			if err != nil {
				t.Fatal(err)
			}
			c := airlock.New(srv.url, airlock.WithAPIKey(strings.TrimSpace(string(key))))
			ctx := ctxT(t, 3*time.Minute)
			se, err := c.CreateSession(ctx, airlock.CreateSessionRequest{IdleTimeoutSeconds: never()})
			if err != nil || se.State != airlock.SessionRunning {
				t.Fatalf("create session: %+v %v", se, err)
			}
			e := &testenv.Env{URL: srv.url, Client: c, DataDir: dir}
			before := startAgent(t, e, se.ID, 1<<20)
			resume := strings.HasPrefix(point, "resume-")
			if resume {
				if _, err := c.PauseSession(ctx, se.ID); err != nil {
					t.Fatal(err)
				}
			}
			// Restart armed, run the step that crashes it, restart disarmed.
			stop(t, srv)
			srv = startServer(t, dir, addr, faultinject.EnvVar+"="+point)
			if !resume {
				// The clean stop paused it; bring it back to pause it again.
				if _, err := c.ResumeSession(ctx, se.ID); err != nil {
					t.Fatal(err)
				}
			}
			if resume {
				_, err = c.ResumeSession(ctx, se.ID)
			} else {
				_, err = c.PauseSession(ctx, se.ID)
			}
			// A crash before the pause answers fails the call. One in the write-behind (the node's store
			// reporting) may come before or after the answer: the node stores at once, and a small image
			// is stored before the answer is written.
			if err == nil && !behind[point] {
				t.Fatalf("the call at %s succeeded; want the server killed before it answered", point)
			}
			if werr := srv.cmd.Wait(); werr == nil || !strings.Contains(werr.Error(), "killed") {
				t.Fatalf("server exit: %v; want killed at %s\n%s", werr, point, srv.log.String())
			}
			srv = startServer(t, dir, addr)
			defer stop(t, srv)
			got, err := c.GetSession(ctx, se.ID)
			if err != nil {
				t.Fatal(err)
			}
			switch got.State {
			case airlock.SessionRunning:
			case airlock.SessionPaused:
				if got.HeadSnapshotID == "" {
					t.Fatalf("paused without a snapshot: %+v", got)
				}
				// The restart completes the snapshot if the crash left it uploading.
				if _, err := c.WaitSnapshot(ctx, se.ID, got.HeadSnapshotID); err != nil {
					t.Fatalf("after a crash at %s: %v\n%s", point, err, srv.log.String())
				}
			default:
				t.Fatalf("after a crash at %s: %s (%s); want running or paused\n%s", point, got.State, got.Reason, srv.log.String())
			}
			after, ok := queryAgent(t, e, se.ID) // resumes a paused session
			if !ok || after.PID != before.PID || after.SHA256 != before.SHA256 || after.Counter < before.Counter {
				t.Fatalf("after a crash at %s (%s): agent %+v %v; want it continued from %+v", point, got.State, after, ok, before)
			}
			t.Logf("crash at %s: the session came back %s; the agent continued at %d", point, got.State, after.Counter)
			if _, err := c.PauseSession(ctx, se.ID); err != nil {
				t.Errorf("pause after recovery: %v", err)
			}
			if err := c.DeleteSession(context.Background(), se.ID); err != nil {
				t.Errorf("delete: %v", err)
			}
		})
	}
}

// stop stops the server cleanly (SIGTERM), which must exit 0.
func stop(t *testing.T, s *server) {
	t.Helper()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	if err := s.cmd.Wait(); err != nil {
		t.Errorf("airlock up after SIGTERM: %v\n%s", err, s.log.String())
	}
}
