package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/tally-dev/tally/pipeline/buildinfo"
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

// version is the version Tally was built as (pipeline/buildinfo: -ldflags -X for a
// release or an image, else the module version and VCS revision), and the layout of the
// state it keeps.
func version() string {
	v := buildinfo.Read()
	goVersion := v.Go
	v.Go = fmt.Sprintf("state layout %d %s", cold.Layout, goVersion)
	// The state layout says which versions can share a cluster (see deploy/README.md,
	// Upgrading): a tallyd takes partitions over from layouts up to its own.
	return v.String("tallyd")
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
