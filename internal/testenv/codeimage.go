package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// codeImagePackages are the Debian packages of the code interpreter's base image: what
// templates/code-interpreter's Dockerfile installs, and the default image's python3.
const codeImagePackages = "python3,python3-ipykernel,python3-jupyter-client,python3-matplotlib,python3-pandas,procps,ca-certificates"

// codeImageScript builds an OCI archive ($2) of Debian 12 with the packages ($1) from the machine's own
// apt sources, as scripts/install.sh builds the default template's image.
const codeImageScript = `set -euo pipefail
sources=/etc/apt/sources.list.d/debian.sources
[ -f "$sources" ] || sources=/etc/apt/sources.list
work=$(mktemp -d /var/tmp/airlock-codeimage.XXXXXX)
trap 'rm -rf "$work"' EXIT
umoci init --layout "$work/oci"
umoci new --image "$work/oci:default"
umoci unpack --image "$work/oci:default" "$work/bundle"
mmdebstrap --quiet --variant=apt --aptopt='APT::Install-Recommends "false"' --include="$1" bookworm "$work/bundle/rootfs" "$sources"
rm -rf "$work/bundle/rootfs/dev" && mkdir -m 0755 "$work/bundle/rootfs/dev"
umoci repack --image "$work/oci:default" "$work/bundle"
umoci config --image "$work/oci:default" --config.env LANG=C.UTF-8
umoci gc --layout "$work/oci"
tar -C "$work/oci" -cf "$2" .
`

// CodeInterpreterImage returns an OCI archive of Debian 12 with the code interpreter's packages
// (python3-ipykernel, -jupyter-client, -matplotlib, -pandas), made from Debian's packages with
// mmdebstrap and umoci (scripts/install.sh installs them) and kept under /var/cache for the next run. A
// server started with it as its default image builds templates/code-interpreter without the network:
// the Dockerfile's apt step finds the packages there.
func CodeInterpreterImage(t testing.TB) string {
	t.Helper()
	for _, tool := range []string{"mmdebstrap", "umoci"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed (scripts/install.sh installs it): %v", tool, err)
		}
	}
	sum := sha256.Sum256([]byte(codeImageScript + codeImagePackages))
	out := filepath.Join("/var/cache/airlock-tests", "code-interpreter-"+hex.EncodeToString(sum[:6])+".tar")
	if _, err := os.Stat(out); err == nil {
		return out
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	tmp := out + ".tmp"
	cmd := exec.CommandContext(ctx, "bash", "-c", codeImageScript, "codeimage", codeImagePackages, tmp)
	if b, err := cmd.CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		t.Fatalf("build the code interpreter's base image (mmdebstrap, from Debian's packages): %v\n%s", err, b)
	}
	if err := os.Rename(tmp, out); err != nil {
		t.Fatal(err)
	}
	return out
}
