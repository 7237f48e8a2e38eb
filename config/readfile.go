package config

import (
	"fmt"
	"io/fs"
	"os"
)

// NotRegularError is returned by [Load] and [ReadFile] for a stack file that
// is not a regular file: a directory, a named pipe (FIFO), a device or a
// socket. Such a file is never read: a FIFO would block the read until a
// writer comes, a device such as /dev/zero never ends.
type NotRegularError struct {
	// Path is the stack file as the caller named it.
	Path string
	// Mode is the file's type as found by stat(2) or, after the open, by
	// fstat(2).
	Mode fs.FileMode
}

// Error says which path is what, for example "stack file x.yaml is a named
// pipe (FIFO), not a regular file".
func (e *NotRegularError) Error() string {
	return fmt.Sprintf("stack file %s is %s, not a regular file", e.Path, describeType(e.Mode))
}

// describeType names the type of a file that is not regular.
func describeType(m fs.FileMode) string {
	switch {
	case m&fs.ModeDir != 0:
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return fmt.Sprintf("a file of type %s", (m & fs.ModeType).String())
}

// ReadFile reads the stack file at path the way [Load] does: only a regular
// file is read (anything else gives a [*NotRegularError] without reading a
// byte), the open never blocks, and a file larger than [MaxFileSize] is
// refused with an error that names its size and the limit. A symlink to a
// regular file is read.
func ReadFile(path string) ([]byte, error) {
	data, size, err := readStackFile(path)
	if err != nil {
		return nil, err
	}
	if size > MaxFileSize {
		return nil, fmt.Errorf("read stack file %s: file is %d bytes, larger than the limit of %d bytes", path, size, MaxFileSize)
	}
	return data, nil
}

// readStackFile stats path, refuses anything but a regular file, opens it
// without blocking (O_NONBLOCK where the platform has it), checks again with
// fstat(2) that what was opened is a regular file (the path may have been
// swapped for a FIFO in between) and reads it up to MaxFileSize+1 bytes.
// size is the file's size by fstat; data is empty when size is over the
// limit. Errors from the file system are wrapped, keeping fs.ErrNotExist.
func readStackFile(path string) (data []byte, size int64, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, 0, fmt.Errorf("load stack file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, &NotRegularError{Path: path, Mode: fi.Mode()}
	}
	f, err := os.OpenFile(path, os.O_RDONLY|openNoBlock, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("load stack file: %w", err)
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, 0, fmt.Errorf("load stack file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, &NotRegularError{Path: path, Mode: fi.Mode()}
	}
	if fi.Size() > MaxFileSize {
		return nil, fi.Size(), nil
	}
	if data, err = readLimited(f); err != nil {
		return nil, 0, fmt.Errorf("load stack file: read %s: %w", path, err)
	}
	return data, fi.Size(), nil
}
