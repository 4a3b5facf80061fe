package daemon

import (
	"errors"
	"fmt"
	"io/fs"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// sentinelFor maps an OS error to the errdefs sentinel that describes it, or nil.
func sentinelFor(err error) error {
	var errno unix.Errno
	if !errors.As(err, &errno) {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return errdefs.ErrNotFound
		case errors.Is(err, fs.ErrExist):
			return errdefs.ErrAlreadyExists
		case errors.Is(err, fs.ErrPermission):
			return errdefs.ErrPermissionDenied
		}
		return nil
	}
	switch errno {
	case unix.ENOENT, unix.ESRCH:
		return errdefs.ErrNotFound
	case unix.EEXIST:
		return errdefs.ErrAlreadyExists
	case unix.EACCES, unix.EPERM, unix.EROFS:
		return errdefs.ErrPermissionDenied
	case unix.ENOTDIR, unix.EISDIR, unix.EINVAL, unix.ENAMETOOLONG, unix.ELOOP, unix.ENOEXEC:
		return errdefs.ErrInvalidArgument
	case unix.ENOTEMPTY, unix.EBUSY, unix.ETXTBSY:
		return errdefs.ErrFailedPrecondition
	case unix.ENOSPC, unix.EDQUOT, unix.EMFILE, unix.ENFILE, unix.ENOMEM, unix.EAGAIN:
		return errdefs.ErrResourceExhausted
	case unix.EFBIG:
		return errdefs.ErrTooLarge
	}
	return nil
}

// mapErrno wraps err with the matching errdefs sentinel so that errdefs.Code reports it; errors that
// already match a sentinel, or match none, are returned unchanged.
func mapErrno(err error) error {
	if err == nil || errdefs.Code(err) != errdefs.Code(errdefs.ErrInternal) || errors.Is(err, errdefs.ErrInternal) {
		return err
	}
	s := sentinelFor(err)
	if s == nil {
		return err
	}
	return fmt.Errorf("%w (%w)", err, s)
}

// invalidf returns an error wrapping errdefs.ErrInvalidArgument.
func invalidf(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalidArgument)...)
}
