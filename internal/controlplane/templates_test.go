package controlplane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/template/oci"
)

// TestTemplateNames: a name resolves to the digest its record points at now, and a create records
// that; a reference with a digest stays as given; the built-in template is "default"; removing a name
// or asking for a missing one is not found; a node that cannot import images refuses the import.
func TestTemplateNames(t *testing.T) {
	ctx := context.Background()
	s, st, n, _, tenant := setup(t)
	d1, d2 := "sha256:"+strings.Repeat("1", 64), "sha256:"+strings.Repeat("2", 64)
	put := func(digest string, version int64) {
		t.Helper()
		b, _ := json.Marshal(templateDoc{Digest: digest, Config: oci.Config{WorkingDir: "/srv"}, Layers: 3})
		if _, err := st.PutDoc(ctx, store.Doc{Key: templateDocPrefix + "app", Value: b, Version: version}); err != nil {
			t.Fatal(err)
		}
	}
	put(d1, 0)
	for ref, want := range map[string]string{"": "default", "default": "default", "app": "app@" + d1, "app@" + d2: "app@" + d2,
		"default@" + d1: "default@" + d1} {
		if got, err := s.resolveTemplate(ctx, ref); err != nil || got != want {
			t.Errorf("resolveTemplate(%q) = %q, %v; want %q", ref, got, err, want)
		}
	}
	sb, err := s.CreateSandbox(ctx, tenant, CreateRequest{Template: "app"})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Template != "app@"+d1 {
		t.Errorf("the sandbox records %q; want app@%s", sb.Template, d1)
	}
	if got := n.lastTemplate(); got != "app@"+d1 {
		t.Errorf("the node was asked to boot %q; want app@%s", got, d1)
	}
	put(d2, 1)
	if got, _ := s.resolveTemplate(ctx, "app"); got != "app@"+d2 {
		t.Errorf("after the re-point: %q", got)
	}
	if got, _ := s.GetSandbox(ctx, tenant, sb.ID); got.Template != "app@"+d1 {
		t.Errorf("the sandbox after the re-point records %q", got.Template)
	}
	ts, err := s.ListTemplates(ctx)
	if err != nil || len(ts) != 2 || !ts[0].Builtin || ts[1].Ref != "app@"+d2 || ts[1].Config.WorkingDir != "/srv" || ts[1].Layers != 3 {
		t.Errorf("ListTemplates = %+v, %v", ts, err)
	}
	for _, ref := range []string{"App", "app@sha256:12"} {
		if _, err := s.resolveTemplate(ctx, ref); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("resolveTemplate(%q) = %v; want invalid argument", ref, err)
		}
	}
	if rm, err := s.DeleteTemplate(ctx, "app"); err != nil || rm.Digest != d2 || rm.Users.InUse() {
		t.Fatalf("DeleteTemplate = %+v, %v; want %s, unused", rm, err, d2)
	}
	// The sandbox still uses the first image.
	if users, err := s.imageUsers(ctx); err != nil || users[d1] == nil || users[d1].SandboxCount != 1 || users[d1].Sandboxes[0] != sb.ID {
		t.Errorf("imageUsers = %v, %v; want sandbox %s using %s", users, err, sb.ID, d1)
	}
	deleteErr := func(name string) error { _, err := s.DeleteTemplate(ctx, name); return err }
	for _, err := range []error{deleteErr("app"), func() error { _, err := s.resolveTemplate(ctx, "app"); return err }()} {
		if !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("after the removal: %v; want not found", err)
		}
	}
	if err := deleteErr("default"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("removing the built-in template: %v; want invalid argument", err)
	}
	if _, err := s.ImportTemplate(ctx, "app", bytes.NewReader([]byte("x"))); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("import on a node that cannot: %v; want failed precondition", err)
	}
}
