package vm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// fakeVMM is a Snapshotter that records its calls and fails the one named in fail.
type fakeVMM struct {
	calls []string
	fail  string
}

func (f *fakeVMM) call(name string) error {
	f.calls = append(f.calls, name)
	if name == f.fail {
		return fmt.Errorf("%s: no space left", name)
	}
	return nil
}

func (f *fakeVMM) Stop(context.Context) error { return f.call("stop") }
func (f *fakeVMM) Save(_ context.Context, imageDir string) error {
	if err := f.call("save"); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(imageDir, "memory"), []byte("mem"), 0o600)
}
func (f *fakeVMM) Recover(context.Context)      { f.call("recover") }
func (f *fakeVMM) Resume(context.Context) error { return f.call("resume") }
func (f *fakeVMM) Wake(context.Context)         { f.call("wake") }

// TestCheckpointTake: a checkpoint stops the guest, saves it, copies its disk and record into the image
// and leaves it paused or running as asked; a failure before the image is whole lets the guest run again.
func TestCheckpointTake(t *testing.T) {
	for _, tc := range []struct {
		name         string
		leaveRunning bool
		fail         string
		wantCalls    []string
		wantErr      bool
		wantPaused   bool
	}{
		{"paused", false, "", []string{"stop", "save"}, false, true},
		{"left running", true, "", []string{"stop", "save", "resume", "wake"}, false, false},
		{"stop fails", false, "stop", []string{"stop"}, true, false},
		{"save fails", true, "save", []string{"stop", "save", "recover"}, true, false},
		{"resume fails", true, "resume", []string{"stop", "save", "resume"}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, image := t.TempDir(), filepath.Join(t.TempDir(), "image")
			if err := os.WriteFile(filepath.Join(dir, DiskFile), []byte("disk"), 0o600); err != nil {
				t.Fatal(err)
			}
			vmm := &fakeVMM{fail: tc.fail}
			cp := Checkpoint{Driver: "test", ID: "sb1", Dir: dir, ImageDir: image, ImageFile: "test.json",
				Record: map[string]string{"driver": "test"}, LeaveRunning: tc.leaveRunning, Log: slog.New(slog.DiscardHandler)}
			err := cp.Take(t.Context(), vmm)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Take: %v; want error %t", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.wantCalls, vmm.calls); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
			if _, err := os.Stat(filepath.Join(dir, PausedFile)); (err == nil) != tc.wantPaused {
				t.Errorf("paused mark there: %t; want %t", err == nil, tc.wantPaused)
			}
			if tc.wantErr && tc.fail != "resume" {
				return
			}
			for name, want := range map[string]string{DiskFile: "disk", "memory": "mem", "test.json": `{"driver":"test"}`} {
				if b, err := os.ReadFile(filepath.Join(image, name)); err != nil || string(b) != want {
					t.Errorf("image's %s = %q, %v; want %q", name, b, err, want)
				}
			}
		})
	}
}

// TestCheckpointTakeDiskFails: a disk that cannot be copied fails the checkpoint, and the guest runs
// again.
func TestCheckpointTakeDiskFails(t *testing.T) {
	vmm := &fakeVMM{}
	cp := Checkpoint{Driver: "test", ID: "sb1", Dir: t.TempDir(), ImageDir: t.TempDir(), ImageFile: "test.json",
		Log: slog.New(slog.DiscardHandler)}
	if err := cp.Take(t.Context(), vmm); err == nil {
		t.Fatal("Take of a VM without a disk: no error")
	}
	if diff := cmp.Diff([]string{"stop", "save", "recover"}, vmm.calls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

// TestReadImage: a restore takes only an image its driver made; anything else is ErrInvalidArgument.
func TestReadImage(t *testing.T) {
	for _, tc := range []struct {
		name, content string
		wantErr       error
	}{
		{"ours", `{"driver":"vm:x","cpus":2}`, nil},
		{"another driver's", `{"driver":"qemu","cpus":2}`, errdefs.ErrInvalidArgument},
		{"no driver", `{"cpus":2}`, errdefs.ErrInvalidArgument},
		{"not JSON", `{"driver":`, errdefs.ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "x.json"), []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			var rec struct {
				CPUs int `json:"cpus"`
			}
			err := ReadImage("x", "sb1", dir, "x.json", "vm:x", &rec)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("ReadImage: %v; want %v", err, tc.wantErr)
			}
			if err == nil && rec.CPUs != 2 {
				t.Errorf("record read: %+v; want 2 CPUs", rec)
			}
		})
	}
	if err := ReadImage("x", "sb1", t.TempDir(), "x.json", "vm:x", new(struct{})); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("ReadImage of a missing image: %v; want ErrInvalidArgument", err)
	}
}
