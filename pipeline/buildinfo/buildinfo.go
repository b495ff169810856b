// Package buildinfo says which Tally a binary is: the version given at link time, or
// else the module version and VCS revision Go records in the binary. tallyd --version,
// tally version and the tally_build_info metric all read it here.
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// version is set by the linker for a release or an image, where the build has no VCS
// information (the Docker context leaves .git out) and the module version is "(devel)":
//
//	go build -ldflags "-X github.com/tally-dev/tally/pipeline/buildinfo.version=v1.2.0"
//
// -X can only set a package-level string; nothing else writes it.
var version string

// Info is what a binary was built from.
type Info struct {
	// Version is the linker's version, else the module version (v1.2.0 from go install
	// …@v1.2.0, a pseudo-version, or "(devel)" for a build in the repository).
	Version  string
	Revision string // the VCS commit, when the build saw one
	Time     string // the commit's time
	Modified bool   // built from a work tree with uncommitted changes
	Go       string
}

// Read returns the binary's build information.
func Read() Info {
	i := Info{Version: version, Go: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		if i.Version == "" {
			i.Version = "unknown"
		}
		return i
	}
	if i.Version == "" {
		i.Version = bi.Main.Version
	}
	if i.Version == "" {
		i.Version = "unknown"
	}
	for _, kv := range bi.Settings {
		switch kv.Key {
		case "vcs.revision":
			i.Revision = kv.Value
		case "vcs.time":
			i.Time = kv.Value
		case "vcs.modified":
			i.Modified = kv.Value == "true"
		}
	}
	return i
}

// String is the version line of a command: "tallyd v1.2.0 commit 0123456789ab of
// 2026-11-25T10:00:00Z go1.26.8".
func (i Info) String(command string) string {
	s := command + " " + i.Version
	// A pseudo-version already names the commit.
	if rev := i.Revision[:min(12, len(i.Revision))]; rev != "" && !strings.Contains(i.Version, rev) {
		s += " commit " + rev
		if i.Modified {
			s += "+dirty"
		}
	}
	if i.Time != "" {
		s += " of " + i.Time
	}
	return s + " " + i.Go
}
