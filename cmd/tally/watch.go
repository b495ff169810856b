package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
)

// runWatch prints one JSON line per changed id: {"id":…, "<field>":…, …}. A message on
// the change subjects that is no change event is reported on stderr and skipped.
func runWatch(ctx context.Context, c *client.Client, fs *flag.FlagSet, e env) error {
	if err := needArgs(fs, 1, "a family"); err != nil {
		return err
	}
	// A family nobody counts has no change events: say so rather than wait for ever. Any
	// other answer (none, when no tallyd runs) leaves the watch to the changes stream.
	if _, err := c.Get(ctx, fs.Arg(0), 0); errors.Is(err, client.ErrUnknownFamily) {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	enc := json.NewEncoder(e.stdout)
	for ch, err := range c.Changes(ctx, fs.Arg(0)) {
		if errors.Is(err, client.ErrBadChange) {
			fmt.Fprintln(e.stderr, "tally: watch:", err)
			continue
		}
		if err != nil {
			return err
		}
		if err := printChange(enc, ch.Change); err != nil {
			return err
		}
	}
	return nil
}

// printChange writes a line per id of ch; an id without counts (a malformed change) gets
// its id alone.
func printChange(enc *json.Encoder, ch pipeline.Change) error {
	for i, id := range ch.IDs {
		row := map[string]uint64{"id": uint64(id)}
		if i < len(ch.Counts) {
			for j, f := range ch.Fields {
				if j < len(ch.Counts[i]) {
					row[f] = ch.Counts[i][j]
				}
			}
		}
		if err := enc.Encode(row); err != nil {
			return fmt.Errorf("cannot write: %w", err)
		}
	}
	return nil
}
