//go:build !unix

package config

// openNoBlock is 0 where there is no O_NONBLOCK; the fstat(2) check after
// the open still refuses anything that is not a regular file.
const openNoBlock = 0
