package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"

	"github.com/tally-dev/tally/client"
)

// runWatch prints one JSON line per changed id: {"id":…, "<field>":…, …}.
func runWatch(ctx context.Context, c *client.Client, fs *flag.FlagSet, e env) error {
	if err := needArgs(fs, 1, "a family"); err != nil {
		return err
	}
	changes, err := c.Watch(ctx, fs.Arg(0))
	if err != nil {
		return err
	}
	enc := json.NewEncoder(e.stdout)
	for ch := range changes {
		for i, id := range ch.IDs {
			row := map[string]uint64{"id": uint64(id)}
			for j, f := range ch.Fields {
				if j < len(ch.Counts[i]) {
					row[f] = ch.Counts[i][j]
				}
			}
			if err := enc.Encode(row); err != nil {
				return fmt.Errorf("cannot write: %w", err)
			}
		}
	}
	return nil
}
