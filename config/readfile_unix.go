//go:build unix

package config

import "syscall"

// openNoBlock keeps open(2) from waiting for a FIFO's writer (or a device)
// in the moment between the stat that refuses one and the open.
const openNoBlock = syscall.O_NONBLOCK
