package main

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestVersionFromBuildInfo(t *testing.T) {
	t.Parallel()
	bi := &debug.BuildInfo{
		GoVersion: "go1.26.0",
		Main:      debug.Module{Path: "github.com/localcloud/localcloud", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-01-02T03:04:05Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	v := versionFrom(bi)
	if v.Version != "v1.2.3" || v.Revision != "0123456789abcdef0123456789abcdef01234567" || !v.Modified || v.GoVersion != "go1.26.0" {
		t.Errorf("versionFrom = %+v", v)
	}
	want := "localcloud v1.2.3 (0123456789ab, 2026-01-02T03:04:05Z, modified) go1.26.0 " + runtime.GOOS + "/" + runtime.GOARCH
	if got := versionLine(v); got != want {
		t.Errorf("versionLine = %q, want %q", got, want)
	}
	if v := versionFrom(nil); v.Version != "unknown" || v.GoVersion != runtime.Version() {
		t.Errorf("versionFrom(nil) = %+v", v)
	}
}
