package cli

import (
	"strings"
	"testing"

	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// TestPrintTemplate: template get shows a template's start command, how its sandboxes get it, its ready
// check and its labels.
func TestPrintTemplate(t *testing.T) {
	var b strings.Builder
	printTemplate(&b, &airlock.Template{Name: "api", Ref: "api@sha256:ab", Layers: 3, Labels: map[string]string{"b": "2", "a": "1"},
		Start: &airlock.TemplateStart{Cmd: []string{"/bin/sh", "-c", "serve --port 8000"}, ReadyCmd: []string{"/bin/sh", "-c", "true"}, Snapshot: true}})
	for _, want := range []string{"start:       /bin/sh -c 'serve --port 8000' (restored running from a start snapshot)\n",
		"ready when:  /bin/sh -c true\n", "labels:      a=1\n             b=2\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("template get printed:\n%s\nwant a line %q", b.String(), want)
		}
	}
}
