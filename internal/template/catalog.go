package template

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/airlockrun/airlock/internal/blob"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/template/oci"
)

// Catalog is the node's Registry: the default template (HostRegistry) and templates made from OCI images
// (an oci.Store under Dir/oci, which keeps images by digest). An image template is referred to by its
// name and digest ("python@sha256:…"): the control plane resolves a name to the digest it points at
// and records that reference in the sandbox, session and snapshot, so resume, fork and restore boot
// exactly the image they booted before, whatever the name points at since.
type Catalog struct {
	Host *HostRegistry
	OCI  *oci.Store
}

// baseVersion names what imageBase writes; another makes each image's base layer again.
const baseVersion = "1"

// NewCatalog returns the catalog that keeps its templates under dir.
func NewCatalog(dir string) *Catalog {
	return &Catalog{Host: NewHostRegistry(dir),
		OCI: &oci.Store{Dir: filepath.Join(dir, "oci"), Base: imageBase, BaseVersion: baseVersion}}
}

// Close releases what the default template holds on the host (HostRegistry.Close).
func (c *Catalog) Close() error { return c.Host.Close() }

// ParseRef splits a template reference into its name and digest ("" if it names none). "default" (or
// "") is the built-in template, the host's /usr; "default@DIGEST" is an image the default template
// points, or pointed, at (controlplane.InstallDefaultImage).
func ParseRef(ref string) (name, digest string, err error) {
	if IsDefault(ref) {
		return DefaultName, "", nil
	}
	name, digest, _ = strings.Cut(ref, "@")
	if err := oci.CheckName(name); err != nil {
		return "", "", err
	}
	if digest != "" {
		if err := oci.CheckDigest(digest); err != nil {
			return "", "", fmt.Errorf("template %q: %w", ref, err)
		}
	}
	return name, digest, nil
}

// Get returns the template ref names: the default one, or an image's root with the platform's base
// layer over it (mounted on first use). An image template's reference must carry its digest.
func (c *Catalog) Get(ctx context.Context, ref string) (Template, error) {
	name, digest, err := ParseRef(ref)
	if err != nil {
		return Template{}, err
	}
	if name == DefaultName && digest == "" {
		// The built-in template: the host's /usr (the legacy default, once an image is installed).
		return c.Host.Get(ctx, name)
	}
	if digest == "" {
		// Only the control plane knows names; it asks for what a name points at by its digest.
		return Template{}, fmt.Errorf("template %q: not found here by name (a node boots image templates by name@digest): %w", ref, errdefs.ErrNotFound)
	}
	img, err := c.OCI.Get(digest)
	if err != nil {
		return Template{}, fmt.Errorf("template %s: %w", name, err)
	}
	root, err := c.OCI.Root(digest)
	if err != nil {
		return Template{}, fmt.Errorf("template %s: %w", name, err)
	}
	return Template{Name: name + "@" + digest, Digest: digest, RootFS: root, Env: imageEnv(img.Config.Env),
		WorkingDir: img.Config.WorkingDir, User: img.Config.User, Entrypoint: img.Config.Entrypoint, Cmd: img.Config.Cmd}, nil
}

// List reports the default template: image templates are named by the control plane.
func (c *Catalog) List(ctx context.Context) ([]string, error) { return []string{DefaultName}, nil }

// Import imports the image at src (see oci.Store.Import) and returns it.
func (c *Catalog) Import(ctx context.Context, src string) (oci.Image, error) {
	return c.OCI.Import(ctx, src)
}

// Pull fetches the image ref names from its registry (see oci.Store.Pull) and returns it.
func (c *Catalog) Pull(ctx context.Context, ref string, opts oci.PullOptions) (oci.Image, error) {
	return c.OCI.Pull(ctx, ref, opts)
}

// imageEnv is an image's environment for processes: its own, with a PATH if it sets none.
func imageEnv(env []string) []string {
	out := append([]string(nil), env...)
	for _, e := range out {
		if strings.HasPrefix(e, "PATH=") {
			return out
		}
	}
	return append(out, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
}

// maxAccountFile bounds what is read of an image's /etc/passwd or /etc/group.
const maxAccountFile = 1 << 20

// imageBase writes the platform's layer over an image into dst: the daemon's mount point and socket
// directory, the sandbox user's home, a /tmp, and an /etc whose hosts, hostname and resolv.conf are the
// platform's (DNS is the node gateway's) and whose passwd and group are the image's with the sandbox
// user added if the image lacks it. Directories the image has keep their mode and owner.
func imageBase(dst string, image *os.Root) error {
	dirs := []rootDir{
		{"etc", 0o755, 0, 0},
		{"home", 0o755, 0, 0},
		{"home/user", 0o750, UserUID, UserGID},
		{"tmp", fs.ModeSticky | 0o777, 0, 0},
		{"run", 0o755, 0, 0},
		{"run/airlock", 0o700, 0, 0},
		{".airlock", 0o755, 0, 0},
		// Where the node puts the sandbox's trust store (these two last: an image's link there is
		// left to resolve inside the sandbox, and neither is made).
		{"etc/ssl", 0o755, 0, 0},
		{"etc/ssl/certs", 0o755, 0, 0},
	}
	for _, d := range dirs {
		if fi, err := image.Lstat(d.path); err == nil && fi.IsDir() {
			st := fi.Sys().(*syscall.Stat_t)
			d.mode, d.uid, d.gid = fi.Mode()&(fs.ModePerm|fs.ModeSticky|fs.ModeSetuid|fs.ModeSetgid), int(st.Uid), int(st.Gid)
		} else if err == nil && strings.HasPrefix(d.path, "etc/ssl") {
			break
		}
		if err := d.make(dst, os.Mkdir); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dst, ".airlock", "init"), nil, 0o755); err != nil {
		return err
	}
	passwd, err := ReadFile(image, "etc/passwd", maxAccountFile)
	if err != nil {
		return err
	}
	group, err := ReadFile(image, "etc/group", maxAccountFile)
	if err != nil {
		return err
	}
	files := map[string]string{
		"etc/passwd": addAccounts(passwd, []string{
			"root:x:0:0:root:/root:/bin/sh",
			fmt.Sprintf("%s:x:%d:%d:Airlock sandbox user:%s:/bin/sh", UserName, UserUID, UserGID, UserHome),
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin",
		}),
		"etc/group":       addAccounts(group, []string{"root:x:0:", fmt.Sprintf("%s:x:%d:", UserName, UserGID), "nogroup:x:65534:"}),
		"etc/hosts":       "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		"etc/hostname":    "sandbox\n",
		"etc/resolv.conf": "# Airlock: DNS is answered by the network gateway\nnameserver 100.96.0.1\noptions timeout:2 attempts:2\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dst, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// ReadFile reads the regular file at name (absolute or relative to the root) beneath root, at most limit
// bytes; nil if there is none. A template, an image above all, is the tenant's input: a link in it is
// followed only within the root (one out of it reads as none), so it cannot make the host read a host
// file, and anything but a regular file (a FIFO that would block) reads as none.
func ReadFile(root *os.Root, name string, limit int64) ([]byte, error) {
	name = strings.TrimPrefix(name, "/")
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read the template's /%s: %w", name, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("the template's /%s has more than %d bytes: %w", name, limit, errdefs.ErrInvalidArgument)
	}
	return b, nil
}

// addAccounts returns the lines of an /etc/passwd or /etc/group file with each of add whose name it
// lacks appended.
func addAccounts(file []byte, add []string) string {
	have := map[string]bool{}
	var out bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(file))
	sc.Buffer(make([]byte, 64<<10), maxAccountFile)
	for sc.Scan() {
		line := sc.Text()
		if name, _, ok := strings.Cut(line, ":"); ok {
			have[name] = true
		}
		out.WriteString(line)
		out.WriteByte('\n')
	}
	for _, a := range add {
		if name, _, _ := strings.Cut(a, ":"); !have[name] {
			out.WriteString(a)
			out.WriteByte('\n')
		}
	}
	return out.String()
}

// Publish writes image digest's blobs into bs, for other nodes to fetch (see oci.Store.Publish).
func (c *Catalog) Publish(ctx context.Context, bs blob.Store, digest string) error {
	return c.OCI.Publish(ctx, bs, digest)
}

// Fetch adds image digest from bs, where another node published it (see oci.Store.Fetch).
func (c *Catalog) Fetch(ctx context.Context, bs blob.Store, digest string) (oci.Image, error) {
	return c.OCI.Fetch(ctx, bs, digest)
}

// Derive makes an image from the stored image parent (a digest, or oci.Scratch) and step (see
// oci.Store.Derive) and returns it.
func (c *Catalog) Derive(ctx context.Context, parent string, step oci.Step) (oci.Image, error) {
	return c.OCI.Derive(ctx, parent, step)
}

// Export writes the image digest to w as an OCI archive (see oci.Store.Export).
func (c *Catalog) Export(ctx context.Context, digest string, w io.Writer) error {
	return c.OCI.Export(ctx, digest, w)
}

// Image returns the stored image digest (errdefs.ErrNotFound if the node lacks it).
func (c *Catalog) Image(digest string) (oci.Image, error) { return c.OCI.Get(digest) }

// Images returns the images the node holds.
func (c *Catalog) Images() ([]oci.Image, error) { return c.OCI.List() }

// RemoveImages removes the images digests and what no other image uses (oci.Store.Remove).
func (c *Catalog) RemoveImages(digests []string) (oci.GCStats, error) { return c.OCI.Remove(digests) }
