// Package template provides the read-only root filesystems sandboxes boot from.
//
// A Registry resolves a template name to a Template. The embedded default, "default", is assembled from the
// host's read-only /usr (and the /bin, /lib*, /sbin that point into it, or are bind-mounted when they are
// directories) with a generated /etc that holds no host secret: so python3, bash and coreutils work at once
// and nothing is downloaded. Templates made from OCI images are served by a Catalog (catalog.go), which
// serves the default template too.
package template

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/runtime"
)

// Template is a root filesystem ready to boot.
type Template struct {
	// Name is the template's reference for good: "default", or an image template's name and digest
	// ("python@sha256:…").
	Name string
	// Digest is an image template's manifest digest; "" for the default template.
	Digest string
	// RootFS is the host directory of the root filesystem. It is never written by a sandbox.
	RootFS string
	// Mounts are read-only host directories the template shows inside (e.g. /usr).
	Mounts []runtime.Mount
	// Masks hide the entries of Mounts that not every host user may read (hidden.go), as of the Get
	// that returned the template.
	Masks []runtime.Mask
	// Env is the template's base environment for processes.
	Env []string
	// WorkingDir, User, Entrypoint and Cmd are an image template's defaults for its processes.
	WorkingDir string
	User       string
	Entrypoint []string
	Cmd        []string
}

// Registry resolves template names.
type Registry interface {
	// Get returns the template called name, or an error wrapping errdefs.ErrNotFound.
	Get(ctx context.Context, name string) (Template, error)
	// List reports the names of the templates the registry has.
	List(ctx context.Context) ([]string, error)
}

// DefaultName is the name of the embedded default template.
const DefaultName = "default"

// User is the non-root user every template provides.
const (
	UserName = "user"
	UserUID  = 1000
	UserGID  = 1000
	UserHome = "/home/user"
)

// version marks the layout of the generated default root; a root of another version is rebuilt.
const version = "3"

// HostRegistry serves the default template, built from the host under Dir on first use.
type HostRegistry struct {
	// Dir is where templates are kept (Dir/default/rootfs).
	Dir string
	// HostRoot is the host root to take /usr and friends from. Empty: "/".
	HostRoot string
	// RescanEvery is how old the list of the host entries the template hides may grow before a Get
	// walks the host directories again, on a host that cannot watch them for changes (hidden.go).
	// Zero: DefaultRescanEvery.
	RescanEvery time.Duration
	// Logger receives the registry's logs. Nil: slog.Default().
	Logger *slog.Logger

	once   sync.Once
	tpl    Template
	err    error
	hidden *hiddenList // made by build, shared with the process's other registries of the same trees

	closeMu sync.Mutex
	closed  bool // guarded by closeMu
}

// NewHostRegistry returns a registry that keeps its templates under dir.
func NewHostRegistry(dir string) *HostRegistry { return &HostRegistry{Dir: dir} }

// List reports the default template.
func (r *HostRegistry) List(ctx context.Context) ([]string, error) { return []string{DefaultName}, nil }

// Get returns the default template, building it the first time. Other names are not found. Its Masks
// are the host entries to hide as they are now (hidden.go); when they cannot be known, Get fails.
func (r *HostRegistry) Get(ctx context.Context, name string) (Template, error) {
	if name == "" {
		name = DefaultName
	}
	if name != DefaultName {
		return Template{}, fmt.Errorf("template %q: %w", name, errdefs.ErrNotFound)
	}
	r.once.Do(func() { r.tpl, r.err = r.build() })
	if r.err != nil {
		return Template{}, r.err
	}
	r.closeMu.Lock()
	closed := r.closed
	r.closeMu.Unlock()
	if closed {
		return Template{}, fmt.Errorf("template %s: registry closed", DefaultName)
	}
	masks, err := r.hidden.current()
	if err != nil {
		return Template{}, fmt.Errorf("template %s: %w", DefaultName, err)
	}
	tpl := r.tpl
	tpl.Masks = masks
	return tpl, nil
}

// Close releases the watches on the host directories (when no other registry of the process shares
// them). Get fails after Close.
func (r *HostRegistry) Close() error {
	r.once.Do(func() { r.err = fmt.Errorf("template %s: registry closed", DefaultName) })
	r.closeMu.Lock()
	defer r.closeMu.Unlock()
	if r.hidden == nil || r.closed {
		return nil
	}
	r.closed = true
	return releaseHiddenList(r.hidden)
}

// hostDirs are the top-level host directories a template shows: bind-mounted read-only when the host has
// a directory there, recreated as the same symlink when the host has a symlink (merged /usr).
var hostDirs = []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"}

func (r *HostRegistry) build() (Template, error) {
	hostRoot := r.HostRoot
	if hostRoot == "" {
		hostRoot = "/"
	}
	base := filepath.Join(r.Dir, DefaultName)
	rootfs := filepath.Join(base, "rootfs")
	tpl := Template{
		Name:   DefaultName,
		RootFS: rootfs,
		Env: []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"LANG=C.UTF-8",
			"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
		},
	}
	var mounts []runtime.Mount
	var roots []scanRoot
	for _, d := range hostDirs {
		p := filepath.Join(hostRoot, d)
		fi, err := os.Lstat(p)
		if err != nil {
			continue
		}
		if fi.Mode().IsDir() {
			mounts = append(mounts, runtime.Mount{Source: p, Destination: "/" + d, ReadOnly: true})
			roots = append(roots, scanRoot{host: p, dest: "/" + d})
		}
	}
	tpl.Mounts = mounts
	log := r.Logger
	if log == nil {
		log = slog.Default()
	}
	r.hidden = acquireHiddenList(roots, r.RescanEvery, log.With("template", DefaultName))

	if b, err := os.ReadFile(filepath.Join(base, "version")); err == nil && string(b) == version {
		return tpl, nil
	}
	// Build into a fresh directory and swap it in, so a crash mid-build never leaves a half root.
	if err := os.MkdirAll(r.Dir, 0o755); err != nil {
		return Template{}, fmt.Errorf("template %s: %w", DefaultName, err)
	}
	tmp, err := os.MkdirTemp(r.Dir, ".build-")
	if err != nil {
		return Template{}, fmt.Errorf("template %s: %w", DefaultName, err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return Template{}, err
	}
	if err := buildRoot(filepath.Join(tmp, "rootfs"), hostRoot); err != nil {
		return Template{}, fmt.Errorf("template %s: %w", DefaultName, err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "version"), []byte(version), 0o644); err != nil {
		return Template{}, err
	}
	if err := os.RemoveAll(base); err != nil {
		return Template{}, err
	}
	if err := os.Rename(tmp, base); err != nil {
		return Template{}, fmt.Errorf("template %s: %w", DefaultName, err)
	}
	return tpl, nil
}

// buildRoot writes the default root filesystem at root.
func buildRoot(root, hostRoot string) error {
	dirs := []rootDir{
		{"", 0o755, 0, 0},
		{"etc", 0o755, 0, 0},
		{"etc/ssl/certs", 0o755, 0, 0},
		{"home", 0o755, 0, 0},
		{"home/user", 0o750, UserUID, UserGID},
		{"root", 0o700, 0, 0},
		{"tmp", fs.ModeSticky | 0o777, 0, 0},
		{"var", 0o755, 0, 0},
		{"var/tmp", fs.ModeSticky | 0o777, 0, 0},
		{"var/log", 0o755, 0, 0},
		{"run", 0o755, 0, 0},
		{"run/airlock", 0o700, 0, 0},
		{"opt", 0o755, 0, 0},
		{"proc", 0o555, 0, 0},
		{"sys", 0o555, 0, 0},
		{"dev", 0o755, 0, 0},
		{"mnt", 0o755, 0, 0},
		{"srv", 0o755, 0, 0},
		{".airlock", 0o755, 0, 0},
	}
	for _, d := range dirs {
		if err := d.make(root, os.MkdirAll); err != nil {
			return err
		}
	}
	// Mount points for the daemon binary.
	if err := os.WriteFile(filepath.Join(root, ".airlock", "init"), nil, 0o755); err != nil {
		return err
	}
	for _, d := range hostDirs {
		fi, err := os.Lstat(filepath.Join(hostRoot, d))
		if err != nil {
			continue
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(filepath.Join(hostRoot, d))
			if err != nil {
				return err
			}
			if err := os.Symlink(target, filepath.Join(root, d)); err != nil {
				return err
			}
		case fi.IsDir():
			if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
				return err
			}
		}
	}
	files := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/bash\n" +
			fmt.Sprintf("%s:x:%d:%d:Airlock sandbox user:%s:/bin/bash\n", UserName, UserUID, UserGID, UserHome) +
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		"etc/group":  "root:x:0:\n" + fmt.Sprintf("%s:x:%d:\n", UserName, UserGID) + "nogroup:x:65534:\n",
		"etc/shadow": "root:*:19000:0:99999:7:::\n" + UserName + ":*:19000:0:99999:7:::\nnobody:*:19000:0:99999:7:::\n",
		"etc/hosts":  "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		// Every DNS query leaving a sandbox, to whatever address, is answered by the node's gateway; this
		// address (the first of the sandbox address pool) is only where the resolver library sends them.
		"etc/resolv.conf":   "# Airlock: DNS is answered by the network gateway\nnameserver 100.96.0.1\noptions timeout:2 attempts:2\n",
		"etc/hostname":      "sandbox\n",
		"etc/nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n",
		"etc/profile":       "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n",
	}
	for name, content := range files {
		mode := fs.FileMode(0o644)
		if name == "etc/shadow" {
			mode = 0o640
		}
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), mode); err != nil {
			return err
		}
	}
	// Copied from the host: files that describe installed software, never credentials or machine identity.
	for _, name := range copyFromHostEtc {
		if err := copyTree(filepath.Join(hostRoot, "etc", name), filepath.Join(root, "etc", name)); err != nil {
			return fmt.Errorf("copy /etc/%s: %w", name, err)
		}
	}
	return nil
}

// rootDir is a directory of a root the platform writes.
type rootDir struct {
	path     string
	mode     fs.FileMode
	uid, gid int
}

// make makes d under root with mkdir, then gives it d's mode and owner. Directories mkdir makes on the
// way (os.MkdirAll) are 0755.
func (d rootDir) make(root string, mkdir func(string, fs.FileMode) error) error {
	p := filepath.Join(root, d.path)
	if err := mkdir(p, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(p, d.mode); err != nil {
		return err
	}
	return os.Lchown(p, d.uid, d.gid)
}

// copyFromHostEtc lists the /etc entries the default template takes from the host. They tell programs
// where libraries, alternatives and CA certificates are; none holds a secret. A missing one is skipped.
var copyFromHostEtc = []string{
	"alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "bash.bashrc",
	"inputrc", "protocols", "services", "networks", "host.conf", "gai.conf", "mime.types", "magic", "magic.mime",
	"debian_version", "os-release", "python3", "python3.11", "ssl/openssl.cnf", "ssl/certs/ca-certificates.crt",
	"perl", "terminfo", "login.defs",
}

// copyTree copies a regular file, symlink or directory tree from src to dst, keeping modes but making
// everything root-owned. A missing src is not an error.
func copyTree(src, dst string) error {
	fi, err := os.Lstat(src)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	case fi.IsDir():
		if err := os.MkdirAll(dst, fi.Mode().Perm()); err != nil {
			return err
		}
		entries, err := os.ReadDir(src)
		if err != nil {
			return err
		}
		names := make([]string, 0, len(entries))
		for _, e := range entries {
			names = append(names, e.Name())
		}
		sort.Strings(names)
		for _, n := range names {
			if err := copyTree(filepath.Join(src, n), filepath.Join(dst, n)); err != nil {
				return err
			}
		}
		return nil
	case fi.Mode().IsRegular():
		// Only world-readable files: anything the host keeps private stays out.
		if fi.Mode().Perm()&0o004 == 0 {
			return nil
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, fi.Mode().Perm())
	default:
		return nil
	}
}

// IsDefault reports whether name names the default template.
func IsDefault(name string) bool { return name == "" || strings.EqualFold(name, DefaultName) }
