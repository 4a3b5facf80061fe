package vm

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/runtime"
	"github.com/airlockrun/airlock/internal/runtime/sandboxdir"
)

// CheckSpec checks what a VM driver (named driver, for errors) can boot of spec: a sandbox ID, init and
// control directory as absolute paths in the guest, and no host directories nor masks over them (a VM
// boots image templates only).
func CheckSpec(driver string, spec runtime.Spec) error {
	if !sandboxdir.IDPattern.MatchString(spec.ID) {
		return fmt.Errorf("%s: bad sandbox id %q: %w", driver, spec.ID, errdefs.ErrInvalidArgument)
	}
	if len(spec.Init) == 0 || !filepath.IsAbs(spec.Init[0]) || !filepath.IsAbs(spec.ControlDir) {
		return fmt.Errorf("%s: init and the control directory must be absolute paths inside the sandbox: %w", driver, errdefs.ErrInvalidArgument)
	}
	if len(spec.Mounts) > 0 {
		return fmt.Errorf("%s: the template shows host directories (%s), which a VM cannot: boot an image template: %w", driver, spec.Mounts[0].Destination, errdefs.ErrFailedPrecondition)
	}
	if len(spec.Masks) > 0 {
		return fmt.Errorf("%s: the spec hides paths (%s), which a VM cannot: boot an image template: %w", driver, spec.Masks[0].Path, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// MakeSandboxDir makes the private directory dir of sandbox id; one that exists is
// errdefs.ErrAlreadyExists.
func MakeSandboxDir(driver, dir, id string) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s: sandbox %s: %w", driver, id, errdefs.ErrAlreadyExists)
		}
		return fmt.Errorf("%s: %w", driver, err)
	}
	return nil
}

// ReadJSON reads the JSON file at path (a driver's own record) into v.
func ReadJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// WriteJSON writes v as JSON to path, readable by root only.
func WriteJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}
