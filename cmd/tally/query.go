package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
)

func getFlags(fs *flag.FlagSet) {
	fs.Bool("json", false, "print the raw JSON reply")
	fs.String("window", "", "the net change over the last 5m, 1h or 1d instead of the counts")
	fs.Bool("exact", false, "exact counts only: ids whose partition has no owner are unavailable rather than counted by its standby (stale)")
}

func runGet(ctx context.Context, c *client.Client, fs *flag.FlagSet, e env) error {
	if err := needArgs(fs, 2, "a family and at least one id"); err != nil {
		return err
	}
	list, err := ids(fs.Args()[1:])
	if err != nil {
		return err
	}
	window := fs.Lookup("window").Value.String()
	if fs.Lookup("json").Value.(flag.Getter).Get().(bool) {
		return getRaw(ctx, c, fs, e, list, window)
	}
	if window != "" {
		if err := checkWindow(window); err != nil {
			return err
		}
		return getWindow(ctx, c, fs.Arg(0), window, list, e)
	}
	var opts []client.GetOption
	if exact(fs) {
		opts = append(opts, client.Exact())
	}
	r, err := c.GetWith(ctx, fs.Arg(0), list, opts...)
	if err != nil {
		return err
	}
	behind := map[int]int64{} // position → ms behind, of the ids a standby counted
	for _, st := range r.Stale {
		for _, i := range st.At {
			behind[i] = st.BehindMs
		}
	}
	estimated := make([]bool, len(r.Fields)) // shown as ~n past ExactViewers
	for i, f := range r.Fields {
		estimated[i] = slices.Contains(r.Estimated, f)
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprint(w, tabRow(append([]string{"id"}, r.Fields...)...))
	for i, id := range list {
		row := []string{strconv.FormatUint(id, 10)}
		if r.Counts[i] == nil { // unavailable: no number to show, not even 0
			for range r.Fields {
				row = append(row, "-")
			}
			row = append(row, "unavailable")
		}
		for j, v := range r.Counts[i] {
			n := strconv.FormatUint(v, 10)
			if j < len(estimated) && estimated[j] && v > pipeline.ExactViewers {
				n = "~" + n
			}
			row = append(row, n)
		}
		if ms, ok := behind[i]; ok {
			row = append(row, fmt.Sprintf("stale (%d ms behind)", ms))
		}
		fmt.Fprint(w, tabRow(row...))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return unavailable(r)
}

func exact(fs *flag.FlagSet) bool { return fs.Lookup("exact").Value.(flag.Getter).Get().(bool) }

// unavailable fails when a get reply lists ids its partitions could not answer.
func unavailable(r *pipeline.GetReply) error {
	if len(r.Unavailable) == 0 {
		return nil
	}
	s := make([]string, len(r.Unavailable))
	for i, id := range r.Unavailable {
		s[i] = id.String()
	}
	return fmt.Errorf("%d ids unavailable (their partition is being handed over; try again): %s", len(r.Unavailable), strings.Join(s, " "))
}

// getWindow prints the net changes over window of list, signed, one row an id.
func getWindow(ctx context.Context, c *client.Client, family, window string, list []uint64, e env) error {
	r, err := c.GetWindow(ctx, family, window, list...)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprint(w, tabRow(append([]string{"id"}, r.Fields...)...))
	for i, id := range list {
		row := []string{strconv.FormatUint(id, 10)}
		if r.Changes[i] == nil {
			for range r.Fields {
				row = append(row, "-")
			}
			row = append(row, "unavailable")
		}
		for _, v := range r.Changes[i] {
			row = append(row, strconv.FormatInt(v, 10))
		}
		fmt.Fprint(w, tabRow(row...))
	}
	fmt.Fprint(w, tabRow("window", r.Window))
	if err := w.Flush(); err != nil {
		return err
	}
	return unavailable(r)
}

// getRaw asks in JSON, so that the server answers in JSON, and prints the reply as is.
func getRaw(ctx context.Context, c *client.Client, fs *flag.FlagSet, e env, list []uint64, window string) error {
	req := pipeline.GetRequest{IDs: make([]pipeline.ID, len(list)), Exact: exact(fs), Window: window}
	for i, id := range list {
		req.IDs[i] = pipeline.ID(id)
	}
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, fs.Lookup("timeout").Value.(flag.Getter).Get().(time.Duration))
	defer cancel()
	subject := c.Subjects().Get(fs.Arg(0))
	msg, err := e.nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: subject, Data: data,
		Header: nats.Header{"Content-Type": []string{pipeline.ContentTypeJSON}}})
	if err != nil {
		return fmt.Errorf("%s: %w", subject, err)
	}
	fmt.Fprintf(e.stdout, "%s\n", bytes.TrimSpace(msg.Data))
	var r pipeline.GetReply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return fmt.Errorf("%s: cannot decode reply: %w", subject, err)
	}
	if r.Error != "" {
		return fmt.Errorf("%w: %s", client.ErrRemote, r.Error)
	}
	return unavailable(&r)
}

func topFlags(fs *flag.FlagSet) {
	fs.String("window", "1h", "the window to rank by: 5m, 1h or 1d")
	fs.Int("limit", 10, "how many ids")
	fs.Duration("watch", 0, "watch the top: print it each time tallyd pushes a change, asking again at this interval to keep the watch, until Ctrl-C")
}

// runTop prints the top ids, one a line with its change: trending.
func runTop(ctx context.Context, c *client.Client, fs *flag.FlagSet, e env) error {
	if err := needArgs(fs, 2, "a family and a field"); err != nil {
		return err
	}
	if fs.NArg() > 2 {
		return fmt.Errorf("%w: top takes a family and a field, not %q", errUsage, fs.Args()[2:])
	}
	window := fs.Lookup("window").Value.String()
	if err := checkWindow(window); err != nil {
		return err
	}
	limit, err := limitFlag(fs, pipeline.MaxTop)
	if err != nil {
		return err
	}
	show := func(r *pipeline.TopReply) error {
		w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprint(w, tabRow("id", fs.Arg(1)+" over "+window))
		for i, id := range r.IDs {
			fmt.Fprint(w, tabRow(id.String(), "+"+strconv.FormatInt(r.Changes[i], 10)))
		}
		return w.Flush()
	}
	if every := fs.Lookup("watch").Value.(flag.Getter).Get().(time.Duration); every > 0 {
		for r, err := range c.WatchTop(ctx, fs.Arg(0), fs.Arg(1), window, limit, every) {
			if err != nil {
				fmt.Fprintln(e.stderr, "tally top:", err)
				continue
			}
			if err := show(r); err != nil {
				return err
			}
		}
		return nil
	}
	r, err := c.Top(ctx, fs.Arg(0), fs.Arg(1), window, limit)
	if err != nil {
		return err
	}
	return show(r)
}

func runLiked(ctx context.Context, c *client.Client, fs *flag.FlagSet, e env) error {
	if err := needArgs(fs, 2, "a uid and at least one post"); err != nil {
		return err
	}
	list, err := ids(fs.Args())
	if err != nil {
		return err
	}
	liked, err := c.Liked(ctx, list[0], list[1:]...)
	if err != nil {
		return err
	}
	for i, p := range list[1:] {
		fmt.Fprintf(e.stdout, "%d\t%v\n", p, liked[i])
	}
	return nil
}

func listFlags(fs *flag.FlagSet) {
	fs.Int("limit", 20, "ids per page")
	fs.String("before", "", "cursor from a previous page's next line")
}

func runLikes(ctx context.Context, c *client.Client, fs *flag.FlagSet, e env) error {
	if err := needArgs(fs, 2, `"user <uid>" or "post <post>"`); err != nil {
		return err
	}
	switch fs.Arg(0) {
	case "user":
		return list(ctx, c, fs, e, client.LikesOfUser, fs.Arg(1))
	case "post":
		return list(ctx, c, fs, e, client.LikesOfPost, fs.Arg(1))
	}
	return fmt.Errorf(`%w: "likes user <uid>" or "likes post <post>", not %q`, errUsage, fs.Arg(0))
}

func runFollowList(which string) func(context.Context, *client.Client, *flag.FlagSet, env) error {
	return func(ctx context.Context, c *client.Client, fs *flag.FlagSet, e env) error {
		if err := needArgs(fs, 1, "a uid"); err != nil {
			return err
		}
		return list(ctx, c, fs, e, which, fs.Arg(0))
	}
}

func list(ctx context.Context, c *client.Client, fs *flag.FlagSet, e env, which, idArg string) error {
	id, err := ids([]string{idArg})
	if err != nil {
		return err
	}
	limit, err := limitFlag(fs, pipeline.MaxPage)
	if err != nil {
		return err
	}
	page, err := c.List(ctx, which, id[0], limit, fs.Lookup("before").Value.String())
	if err != nil {
		return err
	}
	for i, id := range page.IDs {
		fmt.Fprintf(e.stdout, "%d\t%s\n", id, time.UnixMilli(page.TS[i]).UTC().Format(time.RFC3339))
	}
	if page.Next != "" {
		fmt.Fprintf(e.stdout, "next: %s\n", page.Next)
	}
	return nil
}

func runUnread(ctx context.Context, c *client.Client, fs *flag.FlagSet, e env) error {
	if err := needArgs(fs, 1, "at least one uid"); err != nil {
		return err
	}
	list, err := ids(fs.Args())
	if err != nil {
		return err
	}
	users, err := c.UnreadMany(ctx, list...)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprint(w, tabRow("uid", "comment", "mention", "like", "dm", "system", "feed"))
	for i, u := range users {
		fmt.Fprintf(w, "%d\t%d\t%d\t%d\t%d\t%d\t%d\n", list[i], u.Comment, u.Mention, u.Like, u.DM, u.System, u.Feed)
	}
	return w.Flush()
}

// runHealth prints the reply as JSON and fails unless every partition is ready.
func runHealth(ctx context.Context, c *client.Client, _ *flag.FlagSet, e env) error {
	h, err := c.Health(ctx)
	if err != nil {
		return err
	}
	if err := json.NewEncoder(e.stdout).Encode(h); err != nil {
		return err
	}
	// Ready, not OK: under a steady load some partition is always a few messages behind.
	// An older tallyd without readiness says only OK.
	if !h.Ready && !h.OK {
		return fmt.Errorf("not ready: %v beyond max lag %s (lagging %v)", h.NotReady, h.MaxLag, h.Lagging)
	}
	return nil
}

// checkWindow makes a --window no tallyd would take a usage error, before anything is asked.
func checkWindow(window string) error {
	if _, err := pipeline.ParseWindow(window); err != nil {
		return fmt.Errorf("%w: --window: %w", errUsage, err)
	}
	return nil
}

// limitFlag reads --limit: 0 (tallyd's default) up to most, or a usage error.
func limitFlag(fs *flag.FlagSet, most int) (int, error) {
	limit := fs.Lookup("limit").Value.(flag.Getter).Get().(int)
	if limit < 0 || limit > most {
		return 0, fmt.Errorf("%w: --limit %d, want 1 to %d", errUsage, limit, most)
	}
	return limit, nil
}
