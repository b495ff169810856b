package query

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/tally-dev/tally/pipeline"
)

// asker is how gather asks partitions for rows of T (counts, or a window's changes).
type asker[T uint64 | int64] interface {
	// local asks a partition registered here, and send hands it a query without
	// waiting (nil when it cannot: it is asked through local then).
	local(o Partition, ids []uint64, out [][]T) error
	send(o Partition, ids []uint64, out [][]T) (wait func() error)
	// remote asks the process serving partition p, and says when a standby answered.
	remote(p int, ids []uint64, out [][]T) (*pipeline.Stale, error)
}

// peerAsker is an asker that asks the process of token, learned to serve two or more
// of the partitions asked, for all their ids in one request (see peers.go); it returns
// the ids that process did not answer, which are asked through remote.
type peerAsker[T uint64 | int64] interface {
	peer(token string, ids []uint64, out [][]T) (missing []pipeline.ID, err error)
}

// gather asks the partitions of ids for their values, in parallel, through a: the
// partitions registered here through send (or local), the others through peer where a
// is a peerAsker and a process is known to serve several, and through remote, which
// says when a standby answered (stale), as counts describes. It serves counts and
// window changes alike.
func gather[T uint64 | int64](s *Server, ctx context.Context, fam pipeline.Family, ids []pipeline.ID, a asker[T]) (values [][]T, unavailable []pipeline.ID, stale []pipeline.Stale, err error) {
	if len(ids) == 0 {
		return nil, nil, nil, fmt.Errorf("%w: ids is empty", pipeline.ErrBadRequest)
	}
	if len(ids) > pipeline.MaxQueryIDs {
		return nil, nil, nil, fmt.Errorf("%w: %d ids, at most %d per request", pipeline.ErrBadRequest, len(ids), pipeline.MaxQueryIDs)
	}
	owners := (*s.owners.Load())[fam.Name]
	if len(owners) != s.cfg.Partitions {
		return nil, nil, nil, fmt.Errorf("family %s is not served here", fam.Name)
	}
	nf, n := len(fam.Fields), len(ids)
	flat := make([]T, n*nf)
	out := make([][]T, n)
	type part struct {
		p, n  int
		ids   []uint64
		out   [][]T
		stale *pipeline.Stale // answered by its standby
		err   error
	}
	// Each partition's ids and rows, in the order asked, are runs of two arrays (a
	// counting sort): a map of parts, a part and two growing lists each, cost a 20-id
	// get some 50 allocations.
	slot := make([]int32, s.cfg.Partitions) // 1 + the part of each partition asked
	of := make([]int32, n)                  // the part of each id
	parts := make([]part, 0, min(n, s.cfg.Partitions))
	for i, id := range ids {
		out[i] = flat[i*nf : (i+1)*nf : (i+1)*nf]
		p := pipeline.PartitionOf(id, s.cfg.Partitions)
		if slot[p] == 0 {
			parts = append(parts, part{p: p})
			slot[p] = int32(len(parts))
		}
		of[i] = slot[p] - 1
		parts[of[i]].n++
	}
	partIDs, partOut := make([]uint64, n), make([][]T, n)
	at := 0
	for k := range parts {
		m := parts[k].n
		parts[k].ids, parts[k].out = partIDs[at:at:at+m], partOut[at:at:at+m]
		at += m
	}
	for i, id := range ids {
		pp := &parts[of[i]]
		pp.ids = append(pp.ids, uint64(id))
		pp.out = append(pp.out, out[i])
	}
	// The partitions of this process that take a query without waiting (send) are all
	// asked first, then waited for in turn; the others each on a goroutine, the last on
	// this one, but for those of another process known to serve several, which are asked
	// of it together. A partition that stopped here (a hand-over under way, or its lease
	// may have lapsed) is asked of the process that serves it now.
	pa, _ := a.(peerAsker[T])
	var wg sync.WaitGroup
	remotely := func(pp *part) { pp.stale, pp.err = a.remote(pp.p, pp.ids, pp.out) }
	waits := make([]func() error, len(parts))
	var tasks []func() // parts asked as a call each, or a peer's together
	var groups []peerGroup
	sent := 0
	for k := range parts {
		pp := &parts[k]
		o := owners[pp.p]
		if o != nil {
			if waits[k] = a.send(o, pp.ids, pp.out); waits[k] != nil {
				sent++
				continue
			}
		}
		if o == nil && pa != nil {
			if token := s.peers.at(fam.Name, pp.p); token != "" {
				groups = addToGroup(groups, token, k)
				continue
			}
		}
		tasks = append(tasks, func() {
			if o != nil {
				if pp.err = a.local(o, pp.ids, pp.out); !errors.Is(pp.err, errUnavailable) {
					return
				}
			}
			remotely(pp)
		})
	}
	for _, g := range groups {
		if len(g.parts) == 1 {
			tasks = append(tasks, func() { remotely(&parts[g.parts[0]]) })
			continue
		}
		tasks = append(tasks, func() {
			n := 0
			for _, k := range g.parts {
				n += len(parts[k].ids)
			}
			gids, gout := make([]uint64, 0, n), make([][]T, 0, n)
			for _, k := range g.parts {
				gids, gout = append(gids, parts[k].ids...), append(gout, parts[k].out...)
			}
			missing, err := pa.peer(g.token, gids, gout)
			for _, k := range g.parts {
				pp := &parts[k]
				switch {
				case err != nil && ctx.Err() != nil:
					pp.err = err
				case err != nil || slices.ContainsFunc(missing, func(id pipeline.ID) bool { return pipeline.PartitionOf(id, s.cfg.Partitions) == pp.p }):
					wg.Go(func() { remotely(pp) })
				}
			}
		})
	}
	for j, task := range tasks {
		if j == len(tasks)-1 && sent == 0 {
			task() // the last on this goroutine, when there is nothing else to wait for
		} else {
			wg.Go(task)
		}
	}
	for k, wait := range waits {
		if wait == nil {
			continue
		}
		pp := &parts[k]
		if pp.err = wait(); errors.Is(pp.err, errUnavailable) {
			wg.Go(func() { remotely(pp) })
		}
	}
	wg.Wait()
	var errs []error
	for _, pp := range parts {
		if pp.err != nil {
			errs = append(errs, pp.err)
			if owners[pp.p] != nil { // a partition of this process failed: not a hand-over
				s.log.Warn("partition query failed", "family", fam.Name, "partition", pp.p, "err", pp.err)
			}
		}
	}
	if len(errs) == len(parts) {
		return nil, nil, nil, fmt.Errorf("%w: no partition of %s could answer: %w", errUnavailable, fam.Name, errors.Join(errs...))
	}
	var staleOf map[int32]int // part → its entry in stale
	for i, id := range ids {
		switch pp := &parts[of[i]]; {
		case pp.err != nil:
			out[i] = nil
			unavailable = append(unavailable, id)
		case pp.stale != nil:
			k, ok := staleOf[of[i]]
			if !ok {
				if staleOf == nil {
					staleOf = map[int32]int{}
				}
				k = len(stale)
				staleOf[of[i]] = k
				stale = append(stale, pipeline.Stale{BehindMs: pp.stale.BehindMs, BehindMsgs: pp.stale.BehindMsgs})
			}
			stale[k].IDs = append(stale[k].IDs, id)
			stale[k].At = append(stale[k].At, i)
		}
	}
	if len(errs) > 0 {
		s.log.Debug("some partitions unavailable", "family", fam.Name, "ids", len(unavailable), "of", len(ids), "err", errors.Join(errs...))
	}
	return out, unavailable, stale, nil
}

// peerGroup is the parts of a get asked of the process of token (peerAsker).
type peerGroup struct {
	token string
	parts []int
}

// addToGroup adds part k to the group of token in groups (a get's few processes).
func addToGroup(groups []peerGroup, token string, k int) []peerGroup {
	for i := range groups {
		if groups[i].token == token {
			groups[i].parts = append(groups[i].parts, k)
			return groups
		}
	}
	return append(groups, peerGroup{token: token, parts: []int{k}})
}
