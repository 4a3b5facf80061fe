package cli

import (
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// fdOf returns the file descriptor of v when it is a file (*os.File).
func fdOf(v any) (int, bool) {
	f, ok := v.(interface{ Fd() uintptr })
	if !ok {
		return -1, false
	}
	return int(f.Fd()), true
}

// isTerminal reports whether fd is a terminal.
func isTerminal(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err == nil
}

// makeRaw puts the terminal fd in raw mode (as cfmakeraw(3) does: no echo, no line editing, no signals
// from keys, no output processing) and returns the function that restores its previous state.
func makeRaw(fd int) (restore func() error, err error) {
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, fmt.Errorf("get terminal state: %w", err)
	}
	raw := *old
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN] = 1
	raw.Cc[unix.VTIME] = 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return nil, fmt.Errorf("set terminal to raw mode: %w", err)
	}
	return func() error {
		if err := unix.IoctlSetTermios(fd, unix.TCSETS, old); err != nil {
			return fmt.Errorf("restore terminal: %w", err)
		}
		return nil
	}, nil
}

// termSize reports the size of the terminal fd.
func termSize(fd int) (rows, cols int, err error) {
	ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
	if err != nil {
		return 0, 0, fmt.Errorf("get terminal size: %w", err)
	}
	return int(ws.Row), int(ws.Col), nil
}

// signalNumber returns the number of a signal named "KILL", "SIGKILL" or "9", or 0 when unknown.
func signalNumber(name string) int {
	name = strings.ToUpper(strings.TrimSpace(name))
	if n, err := strconv.Atoi(name); err == nil && n > 0 && n < 128 {
		return n
	}
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	return int(unix.SignalNum(name))
}

// exitCode converts how a process ended to the exit code of a shell: 128+n for a process killed by
// signal n, the exit code otherwise (255 when it is unknown or out of range).
func exitCode(code int, signal string) int {
	if signal != "" {
		if n := signalNumber(signal); n > 0 {
			return 128 + n
		}
		return 255
	}
	if code < 0 || code > 255 {
		return 255
	}
	return code
}
