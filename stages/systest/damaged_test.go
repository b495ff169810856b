package systest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// Every state backup of an idle prefix cannot be read (each object's chunks rewritten,
// its digest left as it was: what a backup stored with its chunks out of order read as).
// A process that never owned the partitions cannot start them, and says so; its last
// owner, started again on its data directory, takes each of them back — past its share —
// from its own state and replaces every backup though nothing changed; the partitions
// then spread over both, and the last owner stops: the other takes everything over from
// the new backups, every count exact. Before, the last owner took its share only (the
// rest stayed with the other, which failed to start them on every round), and stored no
// new backup of an unchanged partition: nobody else could ever start it.
//
// The backups replaced are what shows the last owner took each partition: it hands one
// on as soon as the other no longer refuses it (its refusal lasts a pause that grows
// from a fifth of a lease TTL), so it need never hold all of them at one moment — an
// earlier form of this test waited for that moment and missed it (1 run in 8 under
// -race beside two busy loops: the last owner started with 0 and 1, took 2 and handed
// it on before it took 3).
func TestDamagedBackupLeftToItsLastOwner(t *testing.T) {
	url, c := rig.NATSServer(t)
	const parts, posts = 4, 64
	config := func(dir string) func(*node.Config) {
		return func(cfg *node.Config) {
			if dir != "" {
				cfg.DataDir = dir
			}
			cfg.Partitions, cfg.Standbys, cfg.LeaseTTL = parts, false, time.Second
			cfg.BackupEvery, cfg.BackupRest = 200*time.Millisecond, -1
		}
	}
	dirA := t.TempDir()
	a := rig.StartJoiner(t, url, config(dirA))
	rig.Eventually(t, "a owns every partition", func() (bool, string) { return len(a.Parts()) == parts, fmt.Sprint(a.Parts()) })
	var evs []pipeline.Event
	for p := range posts {
		for range p % 5 {
			evs = append(evs, pipeline.Event{Type: "view", Post: pipeline.ID(1 + p), N: 1})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := c.Publish(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	exact := func(who string) {
		t.Helper()
		rig.Eventually(t, "every view counted "+who, func() (bool, string) { return viewsExact(ctx, c, posts) })
	}
	exact("by a")
	backedUp := a.Backups.Load()
	rig.Eventually(t, "a's backups past its last changes", func() (bool, string) {
		return a.Backups.Load() >= backedUp+2*parts, fmt.Sprint(a.Backups.Load()-backedUp, " backups")
	})
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(c.Conn())
	if err != nil {
		t.Fatal(err)
	}
	sj := pipeline.NewSubjects("")
	damaged := damageBackups(t, js, sj.StateBucket())
	if len(damaged) != 2*parts {
		t.Fatalf("damaged %d backups, want %d (counters and events of each partition)", len(damaged), 2*parts)
	}

	b := rig.StartJoiner(t, url, config(""))
	rig.Eventually(t, "b refuses every partition", func() (bool, string) {
		return len(b.Refused()) == parts && len(b.Parts()) == 0, fmt.Sprint("refused ", b.Refused(), ", owns ", b.Parts())
	})

	a = rig.StartJoiner(t, url, config(dirA))
	obs, err := js.ObjectStore(ctx, sj.StateBucket())
	if err != nil {
		t.Fatal(err)
	}
	rig.Eventually(t, "every damaged backup replaced by a, their last owner, though nothing changed", func() (bool, string) {
		for _, o := range currentBackups(t, js, parts) {
			if damaged[o] {
				return false, "still current: " + o
			}
			if _, err := obs.GetBytes(ctx, o); err != nil {
				return false, fmt.Sprintf("current backup %s: %v", o, err)
			}
		}
		return true, ""
	})
	exact("after a's return")
	rig.Eventually(t, "the partitions shared again", func() (bool, string) {
		return len(a.Parts()) == parts/2 && len(b.Parts()) == parts/2, fmt.Sprint("a ", a.Parts(), ", b ", b.Parts(), " (refusing ", b.Refused(), ")")
	})
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	rig.Eventually(t, "b owns every partition", func() (bool, string) { return len(b.Parts()) == parts, fmt.Sprint(b.Parts()) })
	exact("by b, from the new backups")
	if r := b.Refused(); len(r) != 0 {
		t.Fatalf("b still refuses %v", r)
	}
}

// viewsExact reports whether post 1+p holds p%5 views for each of posts posts.
func viewsExact(ctx context.Context, c *client.Client, posts int) (bool, string) {
	ids := make([]uint64, posts)
	for i := range ids {
		ids[i] = uint64(1 + i)
	}
	got, err := c.GetWith(ctx, "post", ids)
	if err != nil {
		return false, err.Error()
	}
	for i, counts := range got.Counts {
		if want := uint64(i % 5); len(counts) < 4 || counts[3] != want {
			return false, fmt.Sprintf("post %d: %v, want %d views", i+1, counts, want)
		}
	}
	return true, ""
}

// damageBackups rewrites the chunks of every object in bucket with one byte changed,
// leaving its info (its digest) as it was, and returns their names.
func damageBackups(t *testing.T, js jetstream.JetStream, bucket string) map[string]bool {
	t.Helper()
	ctx := t.Context()
	obs, err := js.ObjectStore(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "OBJ_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	infos, err := obs.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, info := range infos {
		data, err := obs.GetBytes(ctx, info.Name)
		if err != nil {
			t.Fatal(err)
		}
		subj := "$O." + bucket + ".C." + info.NUID
		if err := st.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
			t.Fatal(err)
		}
		data[len(data)/2] ^= 0xff
		size := int(info.Opts.ChunkSize)
		if size == 0 {
			size = 128 << 10
		}
		for chunk := range slices.Chunk(data, size) {
			if _, err := js.Publish(ctx, subj, chunk); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := obs.GetBytes(ctx, info.Name); err == nil {
			t.Fatalf("object %s still reads whole", info.Name)
		}
		names[info.Name] = true
	}
	return names
}

// currentBackups lists the objects the backup pointers of parts partitions name.
func currentBackups(t *testing.T, js jetstream.JetStream, parts int) []string {
	t.Helper()
	ctx := t.Context()
	sj := pipeline.NewSubjects("")
	logs, err := js.Stream(ctx, sj.LogStream())
	if err != nil {
		t.Fatal(err)
	}
	var objs []string
	for _, piece := range []string{"counters", "events"} {
		for p := range parts {
			m, err := logs.GetLastMsgForSubject(ctx, sj.BackupPointer(piece+"."+strconv.Itoa(p)))
			if err != nil {
				t.Fatal(err)
			}
			var ptr struct {
				Object string `json:"object"`
			}
			if err := json.Unmarshal(m.Data, &ptr); err != nil {
				t.Fatal(err)
			}
			objs = append(objs, ptr.Object)
		}
	}
	return objs
}
