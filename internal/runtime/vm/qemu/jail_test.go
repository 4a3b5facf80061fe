package qemu

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestFindQEMUFiles: the jail's files are what the host's loader loads for QEMU (ldd's list), its
// TCG module and its firmware, each at the path QEMU opens.
func TestFindQEMUFiles(t *testing.T) {
	bin, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Skip("no qemu-system-x86_64 (scripts/install.sh installs it)")
	}
	q, err := findQEMUFiles(bin)
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]string{}
	for _, f := range q.files {
		in[f.in] = f.host
		if st, err := os.Stat(f.host); err != nil || !st.Mode().IsRegular() {
			t.Errorf("%s: host file %s: %v", f.in, f.host, err)
		}
	}
	if _, ok := in[q.binary]; !ok {
		t.Errorf("no binary %s in %v", q.binary, in)
	}
	out, err := exec.Command("ldd", q.binary).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		var lib string
		switch {
		case len(f) >= 3 && f[1] == "=>":
			lib = f[0]
		case len(f) == 2 && strings.HasPrefix(f[0], "/"):
			if _, ok := in[f[0]]; !ok {
				t.Errorf("no interpreter %s", f[0])
			}
			continue
		default:
			continue
		}
		found := false
		for _, d := range strings.Split(q.libPath, ":") {
			if _, ok := in[filepath.Join(d, lib)]; ok {
				found = true
			}
		}
		if !found {
			t.Errorf("the loader finds no %s in the jail (%s)", lib, q.libPath)
		}
	}
	var tcg, bios bool
	for p := range in {
		tcg = tcg || strings.HasSuffix(p, "/qemu/accel-tcg-x86_64.so")
		bios = bios || strings.HasSuffix(p, "/share/qemu/bios-microvm.bin")
	}
	if !tcg || !bios {
		t.Errorf("TCG module %t, BIOS %t in %v", tcg, bios, in)
	}
}

// TestJailStore: one copy per version of a host file, read-only; a new version gets a new copy; prune
// removes copies no jail links to but those kept.
func TestJailStore(t *testing.T) {
	dir := t.TempDir()
	s := jailStore{dir: filepath.Join(dir, "store")}
	host := filepath.Join(dir, "lib.so")
	if err := os.WriteFile(host, []byte("v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := s.copyOf(host)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := s.copyOf(host); b != a {
		t.Errorf("two copies of one version: %s, %s", a, b)
	}
	if st, err := os.Stat(a); err != nil || st.Mode().Perm() != 0o444 {
		t.Errorf("copy %v %v, want mode 444", st.Mode(), err)
	}
	if err := os.WriteFile(host, []byte("version 2"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := s.copyOf(host)
	if err != nil || b == a {
		t.Fatalf("a new version's copy %s (%v), the old %s", b, err, a)
	}
	if got, _ := os.ReadFile(b); string(got) != "version 2" {
		t.Errorf("copy holds %q", got)
	}
	// a is linked by a jail; b is kept; a third, unlinked and not kept, goes.
	if err := os.Link(a, filepath.Join(dir, "jail-link")); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other")
	os.WriteFile(other, []byte("x"), 0o755)
	c, err := s.copyOf(other)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(c); st.Mode().Perm() != 0o555 {
		t.Errorf("an executable's copy has mode %v", st.Mode())
	}
	s.prune([]string{host})
	for p, want := range map[string]bool{a: true, b: true, c: false} {
		err := unix.Access(p, unix.F_OK)
		if (err == nil) != want {
			t.Errorf("after prune %s exists %t, want %t", p, err == nil, want)
		}
	}
}

// BenchmarkMakeJail: a VM's jail, made at each boot and restore (its copies already in the store).
func BenchmarkMakeJail(b *testing.B) {
	bin, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		b.Skip("no qemu-system-x86_64 (scripts/install.sh installs it)")
	}
	q, err := findQEMUFiles(bin)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	kernel := filepath.Join(dir, "vmlinuz")
	initramfs := filepath.Join(dir, "initramfs.cpio")
	os.WriteFile(kernel, make([]byte, 8<<20), 0o644)
	os.WriteFile(initramfs, make([]byte, 16<<20), 0o644)
	d := &Driver{qemu: q, store: jailStore{dir: filepath.Join(dir, "store")}}
	if err := d.makeJail(filepath.Join(dir, "warm"), kernel, initramfs, false); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		root := filepath.Join(dir, "jail"+strconv.Itoa(i))
		if err := d.makeJail(root, kernel, initramfs, false); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		os.RemoveAll(root)
		b.StartTimer()
	}
}
