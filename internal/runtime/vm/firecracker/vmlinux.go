package firecracker

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	"github.com/klauspost/compress/zstd"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/fsutil"
)

// Firecracker on x86_64 boots an uncompressed ELF kernel (vmlinux); Debian ships its kernel as a
// bzImage only. The bzImage's setup header (Linux's x86 boot protocol, version 2.08 and later) says
// where its compressed kernel is (payload_offset, payload_length, relative to the protected-mode
// code after the setup sectors); the build appends the uncompressed size as 4 little-endian bytes to
// the compressed data. Debian's is xz with the x86 BCJ filter, which Go's known xz decoders lack, so
// xz-utils' xz (Debian: always installed) decompresses it; gzip and zstd payloads are decompressed
// in-process.

// maxVmlinux bounds an uncompressed kernel (Debian's is about 65 MiB).
const maxVmlinux = 512 << 20

var vmlinuxMu sync.Mutex

// Vmlinux returns the ELF kernel of the bzImage at image, extracting it once into dir, named by the
// bzImage's hash.
func Vmlinux(ctx context.Context, image, dir string) (string, error) {
	bz, err := os.ReadFile(image)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(bz)
	dst := filepath.Join(dir, "vmlinux-"+hex.EncodeToString(sum[:12]))
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	vmlinuxMu.Lock()
	defer vmlinuxMu.Unlock()
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	k, err := ExtractVmlinux(ctx, bz)
	if err != nil {
		return "", fmt.Errorf("kernel %s: %w", image, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := fsutil.WriteFileAtomic(dst, k, 0o444); err != nil {
		return "", err
	}
	return dst, nil
}

// ExtractVmlinux returns the ELF kernel a bzImage holds: its compressed payload, decompressed, checked
// against the size the build appended and for being an ELF file.
func ExtractVmlinux(ctx context.Context, bz []byte) ([]byte, error) {
	bad := func(format string, a ...any) ([]byte, error) {
		return nil, fmt.Errorf("not a bzImage this can unpack: "+format+": %w", append(a, errdefs.ErrInvalidArgument)...)
	}
	if len(bz) < 0x250 || string(bz[0x202:0x206]) != "HdrS" {
		return bad("no setup header")
	}
	if v := binary.LittleEndian.Uint16(bz[0x206:]); v < 0x208 {
		return bad("boot protocol %#x, before payload fields", v)
	}
	setupSects := int(bz[0x1f1])
	if setupSects == 0 {
		setupSects = 4
	}
	off := int64(setupSects+1)*512 + int64(binary.LittleEndian.Uint32(bz[0x248:]))
	n := int64(binary.LittleEndian.Uint32(bz[0x24c:]))
	if n <= 4 || off+n > int64(len(bz)) {
		return bad("payload of %d bytes at %d in %d", n, off, len(bz))
	}
	payload := bz[off : off+n]
	size := int64(binary.LittleEndian.Uint32(payload[n-4:]))
	payload = payload[:n-4]
	if size <= 0 || size > maxVmlinux {
		return bad("an uncompressed size of %d", size)
	}
	var out []byte
	var err error
	switch {
	case bytes.HasPrefix(payload, []byte{0xfd, '7', 'z', 'X', 'Z', 0}):
		out, err = unxz(ctx, payload, size)
	case bytes.HasPrefix(payload, []byte{0x1f, 0x8b}):
		var r *gzip.Reader
		if r, err = gzip.NewReader(bytes.NewReader(payload)); err == nil {
			out, err = readBounded(r, size)
		}
	case bytes.HasPrefix(payload, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		var d *zstd.Decoder
		if d, err = zstd.NewReader(bytes.NewReader(payload), zstd.WithDecoderMaxMemory(maxVmlinux)); err == nil {
			out, err = readBounded(d, size)
			d.Close()
		}
	default:
		return bad("a payload compressed as %x…, neither xz, gzip nor zstd", payload[:min(6, len(payload))])
	}
	if err != nil {
		return nil, fmt.Errorf("decompress the kernel: %w", err)
	}
	if int64(len(out)) != size {
		return nil, fmt.Errorf("the kernel decompressed to %d bytes, its bzImage says %d: %w", len(out), size, errdefs.ErrInvalidArgument)
	}
	f, err := elf.NewFile(bytes.NewReader(out))
	if err != nil {
		return nil, fmt.Errorf("the decompressed kernel: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	defer f.Close()
	if f.Class != elf.ELFCLASS64 || f.Machine != elf.EM_X86_64 || f.Type != elf.ET_EXEC {
		return nil, fmt.Errorf("the decompressed kernel is %v %v %v, not an x86-64 executable: %w", f.Class, f.Machine, f.Type, errdefs.ErrInvalidArgument)
	}
	return out, nil
}

// readBounded reads r to its end, failing past size bytes.
func readBounded(r io.Reader, size int64) ([]byte, error) {
	out, err := io.ReadAll(io.LimitReader(r, size+1))
	if err != nil {
		return nil, err
	}
	if int64(len(out)) > size {
		return nil, errors.New("more than the size the bzImage gives")
	}
	return out, nil
}

// unxz decompresses an xz stream with xz-utils' xz.
func unxz(ctx context.Context, payload []byte, size int64) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "xz", "--decompress", "--stdout", "--single-stream")
	cmd.Stdin = bytes.NewReader(payload)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("xz (xz-utils): %w", err)
	}
	out, rerr := readBounded(stdout, size)
	if rerr != nil {
		_ = cmd.Process.Kill()
	}
	werr := cmd.Wait()
	if rerr != nil {
		return nil, rerr
	}
	if werr != nil {
		return nil, fmt.Errorf("xz: %v: %s", werr, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}
