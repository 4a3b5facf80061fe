package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
	"github.com/spf13/pflag"
)

// deployDir holds the deployment examples.
const deployDir = "../../deploy"

// checkCommandLine checks that args (after "airlock") name a command of the CLI and that every flag
// given is one of its flags.
func checkCommandLine(t *testing.T, where string, args []string) {
	t.Helper()
	root := newRoot(&globals{})
	cmd, _, err := root.Find(args)
	if err != nil || cmd == root {
		t.Errorf("%s: airlock %s: no such command (%v)", where, strings.Join(args, " "), err)
		return
	}
	known := func(name string) *pflag.Flag {
		for c := cmd; c != nil; c = c.Parent() {
			if f := c.Flags().Lookup(name); f != nil {
				return f
			}
			if f := c.PersistentFlags().Lookup(name); f != nil {
				return f
			}
		}
		return nil
	}
	for _, a := range args {
		if !strings.HasPrefix(a, "--") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if known(name) == nil {
			t.Errorf("%s: %s: no flag --%s", where, cmd.CommandPath(), name)
		}
	}
}

// TestDeployExamples: the systemd units and the Kubernetes manifests run airlock with commands and
// flags it has, and the manifests parse.
func TestDeployExamples(t *testing.T) {
	units, err := filepath.Glob(filepath.Join(deployDir, "systemd", "*.service"))
	if err != nil || len(units) < 2 {
		t.Fatalf("systemd units: %v %v", units, err)
	}
	for _, u := range units {
		b, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.ReplaceAll(string(b), "\\\n", " ")
		found := false
		for _, line := range strings.Split(text, "\n") {
			if rest, ok := strings.CutPrefix(line, "ExecStart=/usr/local/bin/airlock "); ok {
				found = true
				checkCommandLine(t, filepath.Base(u), strings.Fields(rest))
			}
		}
		if !found {
			t.Errorf("%s runs no airlock command", u)
		}
	}

	b, err := os.ReadFile(filepath.Join(deployDir, "kubernetes", "airlock.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	type container struct {
		Name    string   `yaml:"name"`
		Image   string   `yaml:"image"`
		Command []string `yaml:"command"`
		Args    []string `yaml:"args"`
	}
	type doc struct {
		Kind string `yaml:"kind"`
		Spec struct {
			Template struct {
				Spec struct {
					InitContainers []container `yaml:"initContainers"`
					Containers     []container `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	kinds := map[string]int{}
	airlockCmd := regexp.MustCompile(`(?:^|\s|exec\s)airlock\s+([^|;&]+)`)
	for i, part := range strings.Split(string(b), "\n---\n") {
		var d doc
		if err := yaml.Unmarshal([]byte(part), &d); err != nil {
			t.Fatalf("manifest document %d: %v", i, err)
		}
		kinds[d.Kind]++
		cs := append(d.Spec.Template.Spec.InitContainers, d.Spec.Template.Spec.Containers...)
		for _, c := range cs {
			where := d.Kind + "/" + c.Name
			if len(c.Command) == 0 {
				checkCommandLine(t, where, c.Args)
				continue
			}
			script := strings.Join(c.Args, " ")
			m := airlockCmd.FindAllStringSubmatch(script, -1)
			if len(m) == 0 {
				t.Errorf("%s runs no airlock command: %q", where, script)
			}
			for _, sm := range m {
				checkCommandLine(t, where, strings.Fields(strings.ReplaceAll(sm[1], `"`, "")))
			}
		}
	}
	for _, k := range []string{"Namespace", "ConfigMap", "Deployment", "Service", "DaemonSet"} {
		if kinds[k] == 0 {
			t.Errorf("the manifests have no %s", k)
		}
	}
}

// TestDaemonSetJoinsAsItself: the Kubernetes DaemonSet joins each host's pod under an ID of its own,
// never with --replace, with the join token the manifest tells the operator to make: one for IDs of a
// prefix only (which no other node's ID has), that replaces nothing. (internal/e2e TestDeployManifestJoins
// runs the join script against a cluster.)
func TestDaemonSetJoinsAsItself(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(deployDir, "kubernetes", "airlock.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	tokenCmd := regexp.MustCompile(`(?m)^#\s+airlock (node token create .*)$`).FindStringSubmatch(text)
	if tokenCmd == nil {
		t.Fatal("the manifest does not say how to make the nodes' join token (# airlock node token create …)")
	}
	args := strings.Fields(tokenCmd[1])
	checkCommandLine(t, "the join token", args)
	var prefix string
	for i, a := range args {
		switch {
		case a == "--replace":
			t.Errorf("the nodes' join token is made with --replace: %s", tokenCmd[1])
		case a == "--node-prefix" && i+1 < len(args):
			prefix = args[i+1]
		}
	}
	if prefix == "" {
		t.Fatalf("the nodes' join token names no --node-prefix: %s", tokenCmd[1])
	}
	var ds struct {
		Spec struct {
			Template struct {
				Spec struct {
					InitContainers []struct {
						Name string   `yaml:"name"`
						Args []string `yaml:"args"`
					} `yaml:"initContainers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	for _, part := range strings.Split(text, "\n---\n") {
		if strings.Contains(part, "\nkind: DaemonSet\n") {
			if err := yaml.Unmarshal([]byte(part), &ds); err != nil {
				t.Fatal(err)
			}
		}
	}
	var script string
	for _, c := range ds.Spec.Template.Spec.InitContainers {
		if c.Name == "join" {
			script = strings.Join(c.Args, " ")
		}
	}
	if !strings.Contains(script, "node join") {
		t.Fatalf("the DaemonSet has no join init container running node join: %q", script)
	}
	if strings.Contains(script, "--replace") {
		t.Errorf("the DaemonSet joins with --replace: %q", script)
	}
	if !strings.Contains(script, `id="`+prefix) || !strings.Contains(script, `--id "$id"`) {
		t.Errorf("the DaemonSet's join does not join as %s<host>: %q", prefix, script)
	}
}
