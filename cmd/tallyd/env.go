package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"strings"

	"github.com/tally-dev/tally/store/cold"
)

// setFromEnv sets every flag of fs whose environment variable is set: TALLY_ and the
// flag's name in capitals with - as _ (--hot-max-mem is TALLY_HOT_MAX_MEM). One rule for
// every flag, so a flag added later has its variable too. Values are parsed by the flag
// itself, so a boolean is a boolean (TALLY_JOIN=false is false) and a bad value is an
// error naming the variable. Call it before fs.Parse: the command line wins.
//
// The standard library suffices here: a flag/env library (ff, kong, cobra with viper)
// would add a dependency for these twenty lines.
func setFromEnv(fs *flag.FlagSet, getenv func(string) string) error {
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "version" {
			return
		}
		name := envName(f.Name)
		if f.Usage != "" { // hidden flags (test-*) have no usage
			f.Usage += " [$" + name + "]"
		}
		v := getenv(name)
		if v == "" {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", name, v, err))
		}
	})
	return errors.Join(errs...)
}

// envName is the environment variable of a flag.
func envName(flagName string) string {
	return "TALLY_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// errVersion asks run to print the version and exit.
var errVersion = errors.New("version asked")

// version is the module version and the VCS revision the binary was built from, as Go
// records them in the binary, and the layout of the state it keeps.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "tallyd (no build information)"
	}
	s := "tallyd " + bi.Main.Version
	var rev, at, dirty string
	for _, kv := range bi.Settings {
		switch kv.Key {
		case "vcs.revision":
			rev = kv.Value
		case "vcs.time":
			at = kv.Value
		case "vcs.modified":
			if kv.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	// A module version of a VCS build (a pseudo-version) already names the commit.
	if rev = rev[:min(12, len(rev))]; rev != "" && !strings.Contains(bi.Main.Version, rev) {
		s += " commit " + rev + dirty
	}
	if at != "" {
		s += " of " + at
	}
	// The state layout says which versions can share a cluster (see deploy/README.md,
	// Upgrading): a tallyd takes partitions over from layouts up to its own.
	return s + fmt.Sprintf(" state layout %d ", cold.Layout) + bi.GoVersion
}

// logConfig is how tallyd logs: --log-level and --log-format.
type logConfig struct {
	level  slog.Level
	format string
}

func (c logConfig) logger(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: c.level}
	if c.format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
