package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/airlockrun/airlock/sdk/go/airlock"
)

func newCpCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files and directories between here and a sandbox",
		Long: `Copy a file or a directory tree between this machine and a sandbox. One of SRC and DST is
SANDBOX:/absolute/path, the other a local path ("-" for stdin or stdout).

Like cp -r: when DST is an existing directory the copy goes inside it, otherwise it is created with
DST's name. Directories travel as tar archives; symlinks are copied as links. Files copied out of a
sandbox lose setuid, setgid and sticky bits; nothing from it lands outside what it is copied to, no
link it made is followed, and its contents stream to disk.`,
		Example: `  airlock cp ./src sb_…:/home/user/           # → /home/user/src
  airlock cp sb_…:/home/user/out.json .
  airlock cp sb_…:/home/user/results - | tar t  # a directory to stdout is a tar archive
  echo hi | airlock cp - sb_…:/home/user/hi.txt`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			src, err := parseCpArg(args[0])
			if err != nil {
				return err
			}
			dst, err := parseCpArg(args[1])
			if err != nil {
				return err
			}
			c := g.client()
			switch {
			case src.sandbox != "" && dst.sandbox != "":
				return errors.New("copying from one sandbox to another is not supported; copy through a local directory")
			case src.sandbox == "" && dst.sandbox == "":
				return errors.New("one of SRC and DST must be in a sandbox: SANDBOX:/path")
			case dst.sandbox != "":
				return g.upload(cmd.Context(), c, src.path, dst.sandbox, path.Clean(dst.path))
			default:
				return g.download(cmd.Context(), c, src.sandbox, path.Clean(src.path), dst.path)
			}
		},
	}
}

// upload copies the local path src (or stdin for "-") to dst in the sandbox id.
func (g *globals) upload(ctx context.Context, c *airlock.Client, src, id, dst string) error {
	remote, err := c.Stat(ctx, id, dst)
	switch {
	case errors.Is(err, airlock.ErrNotFound):
		remote = nil
	case err != nil:
		return err
	}
	if src == "-" {
		if remote != nil && remote.Type == "dir" {
			return fmt.Errorf("%s:%s is a directory; name the file to write stdin to", id, dst)
		}
		_, err := c.WriteFile(ctx, id, dst, g.In, 0)
		return err
	}
	info, err := os.Stat(src)
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(src)
	if err != nil {
		return err
	}
	base := filepath.Base(abs)

	if !info.IsDir() {
		if remote != nil && remote.Type == "dir" {
			dst = path.Join(dst, base)
		}
		f, err := os.Open(src)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = c.WriteFile(ctx, id, dst, f, info.Mode().Perm())
		return err
	}

	prefix := base
	switch {
	case remote == nil:
		// cp -r semantics: the directory is created with DST's name and receives SRC's contents.
		if _, err := c.Mkdir(ctx, id, dst); err != nil {
			return err
		}
		prefix = ""
	case remote.Type != "dir":
		return fmt.Errorf("%s:%s exists and is not a directory", id, dst)
	}
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		err := writeTar(pw, abs, prefix)
		pw.CloseWithError(err)
		errc <- err
	}()
	err = c.UploadTar(ctx, id, dst, pr)
	pr.CloseWithError(errUploadEnded) // stops the archiver if the upload ended early
	if werr := <-errc; werr != nil && !errors.Is(werr, errUploadEnded) && !errors.Is(werr, io.ErrClosedPipe) {
		return fmt.Errorf("archive %s: %w", src, werr) // the local failure is the cause of the upload's
	}
	return err
}

// errUploadEnded stops an archiver whose upload has ended.
var errUploadEnded = errors.New("upload ended")

// download copies src in the sandbox id to the local path dst (stdout for "-").
func (g *globals) download(ctx context.Context, c *airlock.Client, id, src, dst string) error {
	remote, err := c.Stat(ctx, id, src)
	if err != nil {
		return err
	}
	if remote.Type != "file" {
		// Directories, and symlinks (copied as links), travel as archives.
		rc, err := c.DownloadTar(ctx, id, src)
		if err != nil {
			return err
		}
		defer rc.Close()
		if dst == "-" {
			_, err := io.Copy(g.Out, rc)
			return err
		}
		if info, err := os.Stat(dst); err == nil && info.IsDir() {
			// Into DST/<src's name>: every entry is renamed under it, so that an archive naming
			// something else (DST/.bashrc) cannot write beside the copy.
			base := path.Base(src)
			if base == "/" {
				base = ""
			}
			return extractTar(rc, dst, base)
		}
		parent := filepath.Dir(dst)
		if info, err := os.Stat(parent); err != nil || !info.IsDir() {
			return fmt.Errorf("%s: no such directory", parent)
		}
		return extractTar(rc, parent, filepath.Base(dst))
	}

	rc, err := c.ReadFileStream(ctx, id, src)
	if err != nil {
		return err
	}
	defer rc.Close()
	if dst == "-" {
		_, err := io.Copy(g.Out, rc)
		return err
	}
	if info, err := os.Stat(dst); err == nil && info.IsDir() {
		dst = filepath.Join(dst, path.Base(src))
	}
	mode := fs.FileMode(0o644)
	if m, err := strconv.ParseUint(remote.Mode, 8, 32); err == nil {
		mode = fs.FileMode(m).Perm()
	}
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, rc); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", dst, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", dst, err)
	}
	return nil
}
