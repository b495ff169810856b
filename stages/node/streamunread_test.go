package node_test

import "github.com/tally-dev/tally/pipeline"

// streamUnread is the part of a model that says what unread counts are by the events
// stream's order: system notices, follows, posts and feed reads by their place. The
// chaos and order models share it.
type streamUnread struct {
	system   int
	sysSeen  map[uint64]int
	followed map[[2]uint64]int // (reader, author) → place of the follow
	posted   map[uint64][]int  // author → places of their posts
	feedRead map[uint64]int
}

func newStreamUnread() streamUnread {
	return streamUnread{sysSeen: map[uint64]int{}, followed: map[[2]uint64]int{}, posted: map[uint64][]int{}, feedRead: map[uint64]int{}}
}

// counts is a user's unread counts: notifications n (comment, mention, like, dm), system
// notices since their last system read, and posts of the accounts they follow stored
// after both the follow and their last feed read.
func (m *streamUnread) counts(u uint64, n *[4]uint64) pipeline.Unread {
	var w pipeline.Unread
	if n != nil {
		w.Comment, w.Mention, w.Like, w.DM = n[0], n[1], n[2], n[3]
	}
	w.System = uint64(m.system - m.sysSeen[u])
	for k, since := range m.followed {
		if k[0] != u {
			continue
		}
		for _, p := range m.posted[k[1]] {
			if p > max(since, m.feedRead[u]) {
				w.Feed++
			}
		}
	}
	return w
}
