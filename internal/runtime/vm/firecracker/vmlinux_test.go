package firecracker

import (
	"bytes"
	"compress/gzip"
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/runtime/vm"
)

// TestVmlinuxFromDebian extracts the ELF kernel from the guest kernel scripts/install.sh unpacks.
func TestVmlinuxFromDebian(t *testing.T) {
	k, err := vm.FindKernel("")
	if err != nil {
		t.Skipf("no guest kernel (scripts/install.sh unpacks Debian's): %v", err)
	}
	if _, err := exec.LookPath("xz"); err != nil {
		t.Skip("no xz (xz-utils)")
	}
	dir := t.TempDir()
	p, err := Vmlinux(context.Background(), k.Image, dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(p)
	if err != nil {
		t.Fatalf("%s is not an ELF file: %v", p, err)
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 || f.Type != elf.ET_EXEC {
		t.Fatalf("%s: %v %v; want an x86-64 executable", p, f.Machine, f.Type)
	}
	// Made once: the second call finds it.
	fi, _ := os.Stat(p)
	p2, err := Vmlinux(context.Background(), k.Image, dir)
	if fi2, _ := os.Stat(p2); err != nil || p2 != p || !os.SameFile(fi, fi2) {
		t.Fatalf("second Vmlinux = %s, %v; want %s again", p2, err, p)
	}
}

// fakeBzImage makes a bzImage of payload (compressed kernel data) with the size the build appends.
func fakeBzImage(payload []byte, size uint32) []byte {
	const setupSects = 3
	bz := make([]byte, (setupSects+1)*512+16)
	bz[0x1f1] = setupSects
	copy(bz[0x202:], "HdrS")
	binary.LittleEndian.PutUint16(bz[0x206:], 0x20f)
	binary.LittleEndian.PutUint32(bz[0x248:], 16) // payload_offset
	payload = binary.LittleEndian.AppendUint32(append([]byte(nil), payload...), size)
	binary.LittleEndian.PutUint32(bz[0x24c:], uint32(len(payload)))
	return append(bz, payload...)
}

func gz(b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

func TestExtractVmlinuxRefuses(t *testing.T) {
	notELF := []byte("not an elf file at all")
	for _, tc := range []struct {
		name string
		bz   []byte
	}{
		{"too short", []byte("MZ")},
		{"no header", make([]byte, 4096)},
		{"payload past the end", func() []byte {
			b := fakeBzImage(gz(notELF), uint32(len(notELF)))
			binary.LittleEndian.PutUint32(b[0x24c:], 1<<30)
			return b
		}()},
		{"unknown compression", fakeBzImage([]byte("BZh91AY&SY"), 10)},
		{"wrong size", fakeBzImage(gz(notELF), uint32(len(notELF)+1))},
		{"huge size", fakeBzImage(gz(notELF), 1<<31)},
		{"not ELF", fakeBzImage(gz(notELF), uint32(len(notELF)))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ExtractVmlinux(context.Background(), tc.bz); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("ExtractVmlinux: %v; want ErrInvalidArgument", err)
			}
		})
	}
}
