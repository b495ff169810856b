package cluster

// A process's membership in the ownership bucket: what it says of itself (its standbys
// warm, priming, partitions stopping or refused, leaving), and one round's view of every
// live member and lease.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// Register writes (or renews) this process's membership, with what SetWarm said last.
func (o *Owners) Register(ctx context.Context) error {
	o.mu.Lock()
	v := append(slices.Clone(o.value), o.warmth...)
	v = append(v, o.priming...)
	v = append(v, o.stopping...)
	v = append(v, o.refused...)
	if o.leaving {
		v = append(v, " leaving"...)
	}
	o.mu.Unlock()
	_, err := o.kv.Put(ctx, memberPrefix+o.id, v)
	return err
}

// SetWarm says, from the next Register on, that this process keeps standbys and which
// of them are warm (ready and caught up): the others hold a partition back from it
// until its standby of the partition is (see Effective). A process that never says so
// (no standbys, or an older version) is handed its partitions at once, cold.
func (o *Owners) SetWarm(ready []int) {
	b := appendList([]byte(" standbys="), ready)
	o.mu.Lock()
	o.warmth = string(b)
	o.mu.Unlock()
}

// SetPriming says, from the next Register on, which of this process's standbys are on
// their way to warm: restoring a backup, waiting for their turn to (one at a time), or
// loading their tables. A holder does not count that time against its patience with a
// partition due to move here (see View.Priming): it grows with the partition's state,
// and a move that lost patience meanwhile was a cold one, the partition unanswered for
// the minutes its restore took.
func (o *Owners) SetPriming(ps []int) { o.say(&o.priming, "priming", ps) }

// SetStopping says, from the next Register on, which partitions are still stopping in
// this process, their leases gone: it cannot start them again until they have stopped,
// which may take long (a last checkpoint behind Badger's compactions), so the others do
// not leave them to it as their last owner (see View.Stopping).
func (o *Owners) SetStopping(ps []int) { o.say(&o.stopping, "stopping", ps) }

// SetRefused says, from the next Register on, which partitions this process cannot
// start because their state backup cannot be read (ErrDamagedBackup): their last owner,
// which keeps their state, is given them over its share if need be (see
// Said.Refused).
func (o *Owners) SetRefused(ps []int) { o.say(&o.refused, "refused", ps) }

// say sets *word, one of the membership's words, to name=ps, or to nothing when ps is
// empty.
func (o *Owners) say(word *string, name string, ps []int) {
	var b []byte
	if len(ps) > 0 {
		b = appendList([]byte(" "+name+"="), ps)
	}
	o.mu.Lock()
	*word = string(b)
	o.mu.Unlock()
}

func appendList(b []byte, ps []int) []byte {
	for i, p := range ps {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(p), 10)
	}
	return b
}

// SetLeaving says, from the next Register on, that this process is stopping: the others
// assign its partitions among themselves (it is no longer one of View.Members) but
// leave each with it until its next owner's standby of it is warm (View.Leaving).
func (o *Owners) SetLeaving() {
	o.mu.Lock()
	o.leaving = true
	o.mu.Unlock()
}

// View is the ownership bucket as read by one round of the assignment.
type View struct {
	Members []string          // live, sorted, this process among them unless it is leaving
	Leaving []string          // live but stopping (SetLeaving): they hold, and are assigned nothing
	Holders map[string]string // each lease key's holder (its node id)
	Said
}

// Said is what the live processes say of partitions in their memberships, each a set of
// partitions by node id.
type Said struct {
	// Warm names, for each member that keeps standbys, the partitions whose standby there
	// is warm; a member that keeps none (or does not say) has no entry.
	Warm map[string]map[int]bool
	// Priming names, for each member, the partitions whose standby there is on its way
	// to warm (SetPriming).
	Priming map[string]map[int]bool
	// Stopping names, for each live process, the partitions it is still stopping
	// (SetStopping): not its to start again until they have stopped.
	Stopping map[string]map[int]bool
	// Refused names, for each live process, the partitions it cannot start, their
	// backup unreadable (SetRefused): their last owner alone can.
	Refused map[string]map[int]bool
}

// Live is Members and Leaving: the processes whose leases are theirs still.
func (v View) Live() []string { return append(slices.Clone(v.Members), v.Leaving...) }

// member is what a membership value says besides who and where (see Register).
type member struct {
	warm              map[int]bool // nil when it says nothing of its standbys (SetWarm)
	priming, stopping map[int]bool // SetPriming, SetStopping
	refused           map[int]bool // SetRefused
	leaving           bool
}

// memberOf reads a membership value. What it does not know it passes over: a newer
// version's words.
func memberOf(v []byte) member {
	var m member
	fs := strings.Fields(string(v)) // "<id> <host> [standbys=<p>,<p>…] [priming=<p>,…] [stopping=<p>,…] [refused=<p>,…] [leaving]"
	for _, f := range fs[min(2, len(fs)):] {
		key, list, _ := strings.Cut(f, "=")
		switch key {
		case "leaving":
			m.leaving = true
		case "standbys":
			m.warm = parseList(list)
		case "priming":
			m.priming = parseList(list)
		case "stopping":
			m.stopping = parseList(list)
		case "refused":
			m.refused = parseList(list)
		}
	}
	return m
}

func parseList(list string) map[int]bool {
	ps := map[int]bool{}
	for s := range strings.SplitSeq(list, ",") {
		if p, err := strconv.Atoi(s); err == nil {
			ps[p] = true
		}
	}
	return ps
}

// Leave deletes this process's membership: the others plan without it from their next
// round.
func (o *Owners) Leave(ctx context.Context) error { return o.kv.Delete(ctx, memberPrefix+o.id) }

// Snapshot reads the live members (sorted, this process among them) and the holder of
// every lease key (its node id).
func (o *Owners) Snapshot(ctx context.Context) (members []string, holders map[string]string, err error) {
	v, err := o.View(ctx)
	return v.Members, v.Holders, err
}

// View reads the live members, what each says of its standbys, and the holder of every
// lease key: those listed, and those of leases (each read whether listed or not). A
// listing of a bucket whose keys are being renewed can miss some (the watch behind it
// ends before a key renewed meanwhile comes round again), and a member or a holder
// missed would change the assignment: the members seen before are read again too.
func (o *Owners) View(ctx context.Context, leases ...string) (View, error) {
	keys, err := o.keys(ctx, "")
	if err != nil {
		return View{}, fmt.Errorf("cannot list the live processes: %w", err)
	}
	o.mu.Lock()
	for id := range o.seen {
		keys = append(keys, memberPrefix+id)
	}
	o.mu.Unlock()
	keys = append(keys, leases...)
	slices.Sort(keys)
	keys = slices.Compact(keys)
	entries, errs := o.getAll(ctx, keys)
	v := View{Holders: map[string]string{}, Said: Said{Warm: map[string]map[int]bool{}, Priming: map[string]map[int]bool{}, Stopping: map[string]map[int]bool{}, Refused: map[string]map[int]bool{}}}
	seen := map[string]bool{}
	for i, k := range keys {
		e, err := entries[i], errs[i]
		if id, ok := strings.CutPrefix(k, memberPrefix); ok {
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				continue // expired, or left
			} else if err != nil { // not knowing what it says would plan as if it kept no standbys
				return View{}, fmt.Errorf("cannot read the membership %s: %w", k, err)
			}
			seen[id] = true
			m := memberOf(e.Value())
			if m.warm != nil {
				v.Warm[id] = m.warm
			}
			if m.priming != nil {
				v.Priming[id] = m.priming
			}
			if m.stopping != nil {
				v.Stopping[id] = m.stopping
			}
			if m.refused != nil {
				v.Refused[id] = m.refused
			}
			if m.leaving || id == o.id && o.isLeaving() {
				v.Leaving = append(v.Leaving, id)
			} else {
				v.Members = append(v.Members, id)
			}
			continue
		}
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil: // a lease taken for free would move the partition
			return View{}, fmt.Errorf("cannot read the lease %s: %w", k, err)
		default:
			v.Holders[k], _, _ = strings.Cut(string(e.Value()), " ")
		}
	}
	o.mu.Lock()
	o.seen = seen
	o.mu.Unlock()
	if !o.isLeaving() && !slices.Contains(v.Members, o.id) {
		v.Members = append(v.Members, o.id)
	}
	slices.Sort(v.Members)
	slices.Sort(v.Leaving)
	return v, nil
}

// keys lists the bucket's keys that start with prefix, deleted ones among them (a
// read then finds them gone), in one request: the subjects of the bucket's stream. The
// bucket's own listing (KeyValue.Keys), used when the stream is not known, makes a
// consumer for each, which took a round most of its time.
func (o *Owners) keys(ctx context.Context, prefix string) ([]string, error) {
	if o.st == nil {
		keys, err := o.kv.Keys(ctx)
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, nil
		}
		return slices.DeleteFunc(keys, func(k string) bool { return !strings.HasPrefix(k, prefix) }), err
	}
	subj := "$KV." + o.kv.Bucket() + "."
	info, err := o.st.Info(ctx, jetstream.WithSubjectFilter(subj+prefix+">"))
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(info.State.Subjects))
	for s := range info.State.Subjects {
		keys = append(keys, strings.TrimPrefix(s, subj))
	}
	return keys, nil
}

// viewReads is how many keys a View reads at once.
const viewReads = 16

// getAll reads keys at once, up to viewReads at a time: a round reads every lease and
// membership, and one read after another took hundreds of milliseconds under load, which
// a hand-over waited for (the next owner's round starts when the lease is let go).
func (o *Owners) getAll(ctx context.Context, keys []string) ([]jetstream.KeyValueEntry, []error) {
	entries, errs := make([]jetstream.KeyValueEntry, len(keys)), make([]error, len(keys))
	sem := make(chan struct{}, viewReads)
	var wg sync.WaitGroup
	for i, k := range keys {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			entries[i], errs[i] = o.kv.Get(ctx, k)
		})
	}
	wg.Wait()
	return entries, errs
}

func (o *Owners) isLeaving() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.leaving
}
