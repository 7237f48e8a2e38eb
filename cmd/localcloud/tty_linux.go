package main

import (
	"os"
	"syscall"
	"unsafe"
)

// isTTY reports whether f is a terminal (TCGETS succeeds on it); /dev/null
// is a character device but not a terminal.
func isTTY(f any) bool {
	fh, ok := f.(*os.File)
	if !ok {
		return false
	}
	var t syscall.Termios
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fh.Fd(), syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	return errno == 0
}
