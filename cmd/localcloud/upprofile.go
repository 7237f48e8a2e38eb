package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
)

// envUpProfile names a path prefix; when it is set, up records a CPU
// profile (PREFIX.cpu.pprof, sampled at upProfileHz) and an execution trace
// (PREFIX.trace) of its start, from the command's first line to the ready
// line: a developer's tool (README, Benchmarks); nothing is written unless
// it is set. The runtime prints "cannot set cpu profile rate" once (the
// rate is set before the profile starts, on purpose), and the kernel's tick
// caps the samples of a thread, so the profile's times undercount: compare
// shares, and count CPU time from /proc instead.
const envUpProfile = "LOCALCLOUD_UP_PROFILE"

// upProfileHz is the CPU profile's sampling rate: a start takes tens of
// milliseconds, which the default 100 Hz sees as a handful of samples.
const upProfileHz = 2000

// startUpProfile starts the profile and trace envUpProfile asks for; stop
// ends both and closes their files (it is a no-op when nothing started).
// A profile that cannot start is reported on stderr and up goes on.
func (a *app) startUpProfile() (stop func()) {
	prefix := a.getenv(envUpProfile)
	if prefix == "" {
		return func() {}
	}
	cpu, err := os.Create(prefix + ".cpu.pprof")
	if err != nil {
		fmt.Fprintf(a.stderr, "localcloud: %s: %v\n", envUpProfile, err)
		return func() {}
	}
	tr, err := os.Create(prefix + ".trace")
	if err != nil {
		_ = cpu.Close()
		fmt.Fprintf(a.stderr, "localcloud: %s: %v\n", envUpProfile, err)
		return func() {}
	}
	runtime.SetCPUProfileRate(upProfileHz)
	cpuErr := pprof.StartCPUProfile(cpu)
	trErr := trace.Start(tr)
	if cpuErr != nil || trErr != nil {
		fmt.Fprintf(a.stderr, "localcloud: %s: cpu profile: %v; trace: %v\n", envUpProfile, cpuErr, trErr)
	}
	return func() {
		if cpuErr == nil {
			pprof.StopCPUProfile()
		}
		if trErr == nil {
			trace.Stop()
		}
		_ = cpu.Close()
		_ = tr.Close()
	}
}
