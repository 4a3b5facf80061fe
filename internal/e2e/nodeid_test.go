package e2e

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/tls"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/airlockrun/airlock/internal/cli"
	"github.com/airlockrun/airlock/internal/cluster"
	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/internal/testenv/pgtest"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// identityCluster is a control plane on PostgreSQL with no node of its own (airlock server), which
// nodes join through the CLI as a test says.
type identityCluster struct {
	t *testing.T
	e *testenv.Env
}

// nodeDir makes a node's data directory (short: sandboxes' sockets live beneath it), removed after the
// nodes that use it stop.
func (ic *identityCluster) nodeDir() string {
	ic.t.Helper()
	dir, err := os.MkdirTemp("", "airlock-nid-")
	if err != nil {
		ic.t.Fatal(err)
	}
	ic.t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// token makes a join token with the CLI (node token create --ttl 1h, and args).
func (ic *identityCluster) token(args ...string) string {
	ic.t.Helper()
	code, out, errOut := runCLI(append([]string{"--url", ic.e.URL, "--api-key", ic.e.APIKey, "node", "token", "create", "--ttl", "1h"}, args...)...)
	tok := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(tok, "alj_") {
		ic.t.Fatalf("node token create %v: %d %q %s", args, code, tok, errOut)
	}
	return tok
}

// join runs node join as node id from the host whose data directory is dir, with token (none if
// empty) and extra flags.
func (ic *identityCluster) join(dir, id, token string, extra ...string) (int, string, string) {
	args := []string{"--url", ic.e.URL, "--data-dir", dir, "node", "join", "--id", id, "--host", "127.0.0.1"}
	if token != "" {
		args = append(args, "--token", token)
	}
	return runCLI(append(args, extra...)...)
}

// start runs node id from dir, the i-th node's sandbox addresses, as airlock node run (a process).
func (ic *identityCluster) start(id, dir string, i int) *testenv.Node {
	ic.t.Helper()
	return testenv.StartNode(ic.t, ic.e, id, testenv.NodeOptions{DataDir: dir, Process: true, SandboxAddresses: testenv.ClusterAddresses(i)})
}

// waitUp waits until every one of ids is up.
func (ic *identityCluster) waitUp(ids ...string) {
	ic.t.Helper()
	testenv.WaitNodes(ic.t, ic.e, "up", ids...)
}

func startIdentityCluster(t *testing.T) *identityCluster {
	testenv.RequireSandboxes(t)
	return &identityCluster{t: t, e: testenv.Start(t, testenv.Options{PostgresDSN: pgtest.Start(t), NoLocalNode: true})}
}

// TestNodeIdentityTheft: a two-node cluster on PostgreSQL. Root on node-2's host, holding node-1's join
// token (and node-2's own key and certificate), cannot take node-1's ID, with or without --replace, nor
// with the proof of its own key, nor join another node with the spent token: node-1 keeps its
// certificate and its sandbox's calls. Positive controls: node-1's host, set up again, re-joins with its
// key and no token, and runs; a fresh node joins with its own token; a replace the operator approved (a
// token made to replace that ID) takes the ID, and the key it replaced proves nothing from then on.
func TestNodeIdentityTheft(t *testing.T) {
	ic := startIdentityCluster(t)
	e := ic.e
	ctx := ctxT(t, 10*time.Minute)
	tok1, tok2 := ic.token(), ic.token()
	dir1, dir2 := ic.nodeDir(), ic.nodeDir()
	if code, out, errOut := ic.join(dir1, "node-1", tok1); code != 0 {
		t.Fatalf("node-1 joins: %d %s %s", code, out, errOut)
	}
	if code, out, errOut := ic.join(dir2, "node-2", tok2); code != 0 {
		t.Fatalf("node-2 joins: %d %s %s", code, out, errOut)
	}
	n1 := ic.start("node-1", dir1, 0)
	ic.start("node-2", dir2, 1)
	ic.waitUp("node-1", "node-2")
	// A sandbox on node-1: what taking its ID would be after (its commands, its credentials).
	var on1 string
	for range 6 {
		if sb := create(t, e, airlock.CreateSandboxRequest{}); sb.Node == "node-1" {
			on1 = sb.ID
			break
		}
	}
	if on1 == "" {
		t.Fatal("no sandbox was placed on node-1")
	}
	fp1 := nodeInfo(t, e, "node-1").CertFingerprint

	// From node-2's host, with node-1's token: refused, without and with --replace.
	if code, _, errOut := ic.join(dir2, "node-1", tok1); code == 0 || !strings.Contains(errOut, "joined already") {
		t.Errorf("node-2's host joins as node-1 with node-1's token: %d %s; want refused (409)", code, errOut)
	}
	if code, _, errOut := ic.join(dir2, "node-1", tok1, "--replace"); code == 0 || !strings.Contains(errOut, "may not take the place") {
		t.Errorf("node-2's host replaces node-1 with node-1's token: %d %s; want refused (403)", code, errOut)
	}
	anon := airlock.New(e.URL)
	_, csr, err := cluster.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	hosts := []string{"127.0.0.1"}
	_, err = anon.JoinNode(ctx, airlock.JoinRequest{Token: tok1, NodeID: "node-1", CSR: string(csr), Hosts: hosts})
	wantCode(t, "a join as node-1 with its token", err, 409)
	_, err = anon.JoinNode(ctx, airlock.JoinRequest{Token: tok1, NodeID: "node-1", CSR: string(csr), Hosts: hosts, Replace: true})
	wantCode(t, "a replace of node-1 with its token", err, 403)
	// With the proof of node-2's key (a certificate of the cluster's, but not node-1's).
	pair2, err := tls.LoadX509KeyPair(filepath.Join(dir2, cli.NodeClusterDir, cli.NodeCertFile), filepath.Join(dir2, cli.NodeClusterDir, cli.NodeKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	cert2, _ := os.ReadFile(filepath.Join(dir2, cli.NodeClusterDir, cli.NodeCertFile))
	p, err := cluster.SignJoinProof(pair2.PrivateKey.(*ecdsa.PrivateKey), cert2, "node-1", csr, hosts, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	proof := &airlock.JoinProof{Certificate: string(p.CertPEM), SignedAt: p.SignedAt, Signature: p.Signature}
	_, err = anon.JoinNode(ctx, airlock.JoinRequest{Token: tok1, NodeID: "node-1", CSR: string(csr), Hosts: hosts, Proof: proof, Replace: true})
	wantCode(t, "a join as node-1 with the proof of node-2's key", err, 403)
	// node-1's token joins no other node either: it was for one, and is spent.
	if code, _, errOut := ic.join(ic.nodeDir(), "node-3", tok1); code == 0 || !strings.Contains(errOut, "used up") {
		t.Errorf("another node joins with node-1's spent token: %d %s; want refused", code, errOut)
	}

	// node-1 is still node-1: its certificate is the one it was given, and its sandbox answers.
	if got := nodeInfo(t, e, "node-1"); got.CertFingerprint != fp1 || got.State != "up" {
		t.Errorf("node-1 after the attempts: %s, %s; want up with %s", got.State, got.CertFingerprint, fp1)
	}
	if res := sh(t, e, on1, "echo still here"); res.Stdout != "still here\n" {
		t.Errorf("node-1's sandbox after the attempts: %+v", res)
	}

	// Positive control: node-1's host, set up again, re-joins with the key in its data directory and no
	// token, keeps the key, and runs as node-1.
	keyBefore, err := os.ReadFile(filepath.Join(dir1, cli.NodeClusterDir, cli.NodeKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := n1.Stop(); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := ic.join(dir1, "node-1", ""); code != 0 || !strings.Contains(out, "joined again with its key") {
		t.Fatalf("node-1 re-joins from its host: %d %s %s", code, out, errOut)
	}
	if keyAfter, _ := os.ReadFile(filepath.Join(dir1, cli.NodeClusterDir, cli.NodeKeyFile)); !bytes.Equal(keyAfter, keyBefore) {
		t.Error("node-1's key changed when it re-joined; want it kept")
	}
	if got := nodeInfo(t, e, "node-1"); got.CertFingerprint == fp1 {
		t.Error("node-1 re-joined and kept its old certificate's fingerprint; want the new one's")
	}
	ic.start("node-1", dir1, 0)
	ic.waitUp("node-1")
	sb := create(t, e, airlock.CreateSandboxRequest{})
	if res := sh(t, e, sb.ID, "echo $((6*7))"); res.Stdout != "42\n" {
		t.Errorf("a sandbox after node-1 re-joined: %+v", res)
	}

	// Positive control: a fresh node joins with a token of its own.
	dir3 := ic.nodeDir()
	if code, out, errOut := ic.join(dir3, "node-3", ic.token()); code != 0 {
		t.Fatalf("node-3 joins with its own token: %d %s %s", code, out, errOut)
	}
	// Positive control: the operator approves a new host for node-3 (a token made to replace it); the
	// new host takes the ID, once, and the old host's key proves nothing from then on.
	approve := ic.token("--node-id", "node-3", "--replace")
	dir4 := ic.nodeDir()
	if code, _, errOut := ic.join(dir4, "node-3", approve); code == 0 || !strings.Contains(errOut, "joined already") {
		t.Errorf("a join with the replace token, not asking to replace: %d %s; want refused", code, errOut)
	}
	if code, out, errOut := ic.join(dir4, "node-3", approve, "--replace"); code != 0 {
		t.Fatalf("an approved replace of node-3: %d %s %s", code, out, errOut)
	}
	if code, _, errOut := ic.join(dir3, "node-3", ""); code == 0 || !strings.Contains(errOut, "not the one node node-3 was last given") {
		t.Errorf("node-3's replaced host re-joins with its key: %d %s; want refused", code, errOut)
	}
	if code, _, errOut := ic.join(dir2, "node-3", approve, "--replace"); code == 0 || !strings.Contains(errOut, "node-3 already") {
		t.Errorf("the replace token again: %d %s; want refused (spent)", code, errOut)
	}
	ic.start("node-3", dir4, 2)
	ic.waitUp("node-1", "node-2", "node-3")
}

// kubeExpand does to a container's argument what Kubernetes does before it runs it: $$ is a $, and
// $(VAR) is the value of the container's variable VAR, here left to the shell as ${VAR} (the test gives
// the script the variables the pod would have).
func kubeExpand(arg string) string {
	name := regexp.MustCompile(`^\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	var b strings.Builder
	for i := 0; i < len(arg); {
		if strings.HasPrefix(arg[i:], "$$") {
			b.WriteByte('$')
			i += 2
			continue
		}
		if m := name.FindStringSubmatch(arg[i:]); m != nil {
			b.WriteString("${" + m[1] + "}")
			i += len(m[0])
			continue
		}
		b.WriteByte(arg[i])
		i++
	}
	return b.String()
}

// daemonSetJoin is the join init container of the Kubernetes manifest's DaemonSet: its script, with
// what Kubernetes expands in it ($(VAR) of its env, $$) expanded, and the join token command the manifest
// says to make the nodes' token with.
func daemonSetJoin(t *testing.T) (script string, tokenArgs []string) {
	t.Helper()
	b, err := os.ReadFile("../../deploy/kubernetes/airlock.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^#.*\bairlock (node token create [^)\n]*)`).FindStringSubmatch(string(b))
	if m == nil {
		t.Fatal("the manifest does not say how to make the nodes' join token")
	}
	var ds struct {
		Kind string `yaml:"kind"`
		Spec struct {
			Template struct {
				Spec struct {
					InitContainers []struct {
						Name    string   `yaml:"name"`
						Command []string `yaml:"command"`
						Args    []string `yaml:"args"`
					} `yaml:"initContainers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	for _, part := range strings.Split(string(b), "\n---\n") {
		if err := yaml.Unmarshal([]byte(part), &ds); err != nil {
			t.Fatal(err)
		}
		if ds.Kind == "DaemonSet" {
			break
		}
	}
	for _, c := range ds.Spec.Template.Spec.InitContainers {
		if c.Name == "join" && slices.Equal(c.Command, []string{"/bin/sh", "-c"}) && len(c.Args) == 1 {
			return kubeExpand(c.Args[0]), strings.Fields(m[1])
		}
	}
	t.Fatal("the DaemonSet has no join init container running a /bin/sh -c script")
	return "", nil
}

// TestDeployManifestJoins: the Kubernetes DaemonSet's join script, run as its init container would on
// two hosts of a cluster on PostgreSQL, with the join token the manifest says to make: each host's pod
// joins under an ID of its own and runs; a pod started again re-joins with the key its host keeps,
// using no token; the pod of one host, holding the shared token, cannot take the other host's ID, with
// or without --replace.
func TestDeployManifestJoins(t *testing.T) {
	script, tokenArgs := daemonSetJoin(t)
	ic := startIdentityCluster(t)
	ctx := ctxT(t, 10*time.Minute)
	code, out, errOut := runCLI(append([]string{"--url", ic.e.URL, "--api-key", ic.e.APIKey}, tokenArgs...)...)
	tok := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(tok, "alj_") {
		t.Fatalf("the manifest's token (%v): %d %q %s", tokenArgs, code, tok, errOut)
	}
	// airlock on the PATH, as in the image.
	bin := t.TempDir()
	if err := os.Symlink(testenv.Binary(t), filepath.Join(bin, "airlock")); err != nil {
		t.Fatal(err)
	}
	// pod runs the join script as the init container on the host named nodeName, whose state directory
	// (the hostPath) is dir; edit changes the script first (what an attacker on the host may do).
	pod := func(dir, nodeName string, edit func(string) string) (string, error) {
		s := strings.ReplaceAll(script, "/var/lib/airlock-node", dir)
		if edit != nil {
			s = edit(s)
		}
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", s)
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "NODE_NAME="+nodeName, "HOST_IP=127.0.0.1",
			"PUBLIC_URL="+ic.e.URL, cli.EnvJoinToken+"="+tok)
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	dirA, dirB := ic.nodeDir(), ic.nodeDir()
	if out, err := pod(dirA, "worker-1.example", nil); err != nil {
		t.Fatalf("the pod on worker-1 joins: %v\n%s", err, out)
	}
	if out, err := pod(dirB, "worker-2.example", nil); err != nil {
		t.Fatalf("the pod on worker-2 joins: %v\n%s", err, out)
	}
	idA, idB := "k8s-worker-1-example", "k8s-worker-2-example"
	a := ic.start(idA, dirA, 0)
	ic.start(idB, dirB, 1)
	ic.waitUp(idA, idB)
	fpA := nodeInfo(t, ic.e, idA).CertFingerprint

	// Root on worker-2, holding the shared token its pod was given, runs the join as worker-1, from its
	// pod's state directory or one of its own: refused, also with --replace.
	withReplace := func(s string) string { return strings.Replace(s, "node join", "node join --replace", 1) }
	for _, dir := range []string{dirB, ic.nodeDir()} {
		if out, err := pod(dir, "worker-1.example", nil); err == nil || !strings.Contains(out, "joined already") {
			t.Errorf("worker-2's host joins as worker-1: %v\n%s; want refused", err, out)
		}
		if out, err := pod(dir, "worker-1.example", withReplace); err == nil || !strings.Contains(out, "may not take the place") {
			t.Errorf("worker-2's host replaces worker-1: %v\n%s; want refused", err, out)
		}
	}
	if got := nodeInfo(t, ic.e, idA); got.CertFingerprint != fpA || got.State != "up" {
		t.Errorf("%s after the attempts: %s %s; want up with %s", idA, got.State, got.CertFingerprint, fpA)
	}

	// worker-1's pod starts again: the script re-joins with the key its host keeps, using no token.
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	if out, err := pod(dirA, "worker-1.example", nil); err != nil || !strings.Contains(out, "joined again with its key") {
		t.Fatalf("worker-1's pod starts again: %v\n%s", err, out)
	}
	ic.start(idA, dirA, 0)
	ic.waitUp(idA, idB)
	l, err := ic.e.Client.ListJoinTokens(ctx)
	if err != nil || len(l.JoinTokens) != 1 || !slices.Equal(l.JoinTokens[0].Joined, []string{idA, idB}) {
		t.Errorf("the DaemonSet's token: %+v %v; want it used by %s and %s only", l, err, idA, idB)
	}
}
