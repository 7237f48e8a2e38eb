//go:build !linux

package main

// isTTY reports false off Linux: run then never hands the terminal to its
// command's process group (signals are still forwarded to the group).
func isTTY(any) bool { return false }
