package oci

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

// FromOverlay turns an archive of a sandbox's writable layer — an overlayfs upper directory as
// sandboxdir.WriteLayerTar archives it: whiteouts as character devices 0/0, opaque directories marked
// with trusted.overlay.opaque — into an OCI image layer (uncompressed) written to w: whiteouts as .wh.
// files, opaque directories with a .wh..wh..opq entry, overlayfs's other attributes and socket files
// dropped.
//
// The archive is the sandbox's work, so hostile: a name that is not a clean relative path, or a file
// whose name would read as a whiteout (".wh." first), is refused with ErrBadLayer naming it. Everything
// else is checked again when the layer is unpacked, as any image's is.
func FromOverlay(r io.Reader, w io.Writer) error {
	tr := tar.NewReader(r)
	tw := tar.NewWriter(w)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return tw.Close()
		}
		if err != nil {
			return fmt.Errorf("%w: the writable layer's archive: %v", ErrBadLayer, err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		if name == "" || path.IsAbs(name) || path.Clean(name) != name || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("%w: %q is not a clean relative path", ErrBadLayer, h.Name)
		}
		dir, base := path.Split(name)
		if strings.HasPrefix(base, whiteoutPrefix) {
			return fmt.Errorf("%w: /%s: a file whose name starts with %q cannot be in an image layer (the OCI image spec's whiteouts are named so)", ErrBadLayer, name, whiteoutPrefix)
		}
		if h.PAXRecords["AIRLOCK.type"] == "socket" {
			continue // a socket file a process left: not part of an image
		}
		opaque := false
		records := map[string]string{}
		for k, v := range h.PAXRecords {
			if !strings.HasPrefix(k, "SCHILY.xattr.") {
				continue
			}
			x := strings.TrimPrefix(k, "SCHILY.xattr.")
			if x == overlayOpaque {
				opaque = h.Typeflag == tar.TypeDir && v == "y"
				continue
			}
			if strings.HasPrefix(x, "trusted.overlay.") {
				continue
			}
			records[k] = v
		}
		out := &tar.Header{Name: h.Name, Typeflag: h.Typeflag, Mode: h.Mode, Uid: h.Uid, Gid: h.Gid,
			ModTime: h.ModTime, Linkname: h.Linkname, Devmajor: h.Devmajor, Devminor: h.Devminor,
			PAXRecords: records, Format: tar.FormatPAX}
		if h.Typeflag == tar.TypeChar && h.Devmajor == 0 && h.Devminor == 0 {
			// A whiteout: the name is deleted from the layers below.
			out = &tar.Header{Name: dir + whiteoutPrefix + base, Typeflag: tar.TypeReg, Mode: 0o600, ModTime: h.ModTime, Format: tar.FormatPAX}
		}
		switch out.Typeflag {
		case tar.TypeReg:
			if out.Name == h.Name {
				out.Size = h.Size
			}
		case tar.TypeDir, tar.TypeSymlink, tar.TypeLink, tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		default:
			return fmt.Errorf("%w: /%s: entry type %q", ErrBadLayer, name, h.Typeflag)
		}
		if err := tw.WriteHeader(out); err != nil {
			return fmt.Errorf("%w: /%s: %v", ErrBadLayer, name, err)
		}
		if out.Size > 0 {
			if _, err := io.CopyN(tw, tr, out.Size); err != nil {
				return fmt.Errorf("%w: /%s: %v", ErrBadLayer, name, err)
			}
		}
		if opaque {
			if err := tw.WriteHeader(&tar.Header{Name: name + "/" + whiteoutOpaque, Typeflag: tar.TypeReg, Mode: 0o600, ModTime: h.ModTime, Format: tar.FormatPAX}); err != nil {
				return err
			}
		}
	}
}
