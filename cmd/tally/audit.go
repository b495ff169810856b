package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
)

// auditGrace is how much longer than --timeout the CLI waits for an audit: the server
// bounds one audit by 20 s, the time its partitions get to settle and its repairs to
// be applied.
const auditGrace = 20 * time.Second

func auditFlags(fs *flag.FlagSet) {
	fs.Int("sample", 0, "also audit this many posts and users picked at random among those with relations")
	fs.Bool("repair", false, "correct each drift found with an incr event of the difference (counted once however often repeated)")
	fs.Bool("json", false, "print the raw JSON reply")
}

// runAudit asks the owner of the event stages to recount posts' like and comment
// counts and users' follower and following counts from the relations and prints every
// counter that drifted; it fails when any did (repaired or not) so that a script
// notices. Ids it could not compare at a consistent point are listed as skipped.
func runAudit(ctx context.Context, c *client.Client, fs *flag.FlagSet, e env) error {
	req := pipeline.AuditRequest{
		Sample: fs.Lookup("sample").Value.(flag.Getter).Get().(int),
		Repair: fs.Lookup("repair").Value.(flag.Getter).Get().(bool),
	}
	var to *[]pipeline.ID
	for _, a := range fs.Args() {
		switch a {
		case pipeline.FamilyPost:
			to = &req.Posts
			continue
		case pipeline.FamilyUser:
			to = &req.Users
			continue
		}
		if to == nil {
			return fmt.Errorf(`%w: "audit post <id>...", "audit user <id>..." or "audit --sample N", not %q`, errUsage, a)
		}
		id, err := pipeline.ParseID(a)
		if err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		*to = append(*to, id)
	}
	if len(req.Posts) == 0 && len(req.Users) == 0 && req.Sample == 0 {
		return fmt.Errorf(`%w: need "post <id>...", "user <id>..." or --sample N`, errUsage)
	}
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, fs.Lookup("timeout").Value.(flag.Getter).Get().(time.Duration)+auditGrace)
	defer cancel()
	subject := c.Subjects().Audit()
	msg, err := e.nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: subject, Data: data,
		Header: nats.Header{"Content-Type": []string{pipeline.ContentTypeJSON}}})
	if err != nil {
		return fmt.Errorf("%s: %w (is a tallyd of this prefix running?)", subject, err)
	}
	var r pipeline.AuditReply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return fmt.Errorf("%s: cannot decode reply: %w", subject, err)
	}
	if r.Error != "" {
		return fmt.Errorf("%w: %s", client.ErrRemote, r.Error)
	}
	if fs.Lookup("json").Value.(flag.Getter).Get().(bool) {
		fmt.Fprintf(e.stdout, "%s\n", msg.Data)
	} else if err := printAudit(e, &r); err != nil {
		return err
	}
	if len(r.Drift) > 0 {
		repaired := 0
		for _, d := range r.Drift {
			if d.Repaired {
				repaired++
			}
		}
		return fmt.Errorf("%d counters drifted from their relations, %d repaired", len(r.Drift), repaired)
	}
	return nil
}

func printAudit(e env, r *pipeline.AuditReply) error {
	if len(r.Drift) > 0 {
		w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprint(w, tabRow("family", "id", "field", "counter", "relations", "repair"))
		for _, d := range r.Drift {
			repair := "-"
			if d.Repaired {
				repair = d.Tx
			}
			fmt.Fprint(w, tabRow(d.Family, d.ID.String(), d.Field, strconv.FormatUint(d.Counter, 10), strconv.FormatUint(d.Relations, 10), repair))
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(e.stdout, "skipped %s %s: %s\n", s.Family, s.ID, s.Reason)
	}
	fmt.Fprintf(e.stdout, "audited %d posts and %d users: %d counters checked, %d drifted, %d ids skipped\n",
		len(r.Posts), len(r.Users), r.Checked, len(r.Drift), len(r.Skipped))
	return nil
}
