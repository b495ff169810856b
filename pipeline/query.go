package pipeline

// Request and reply payloads of the query subjects. Each is a JSON object or a
// MessagePack map with the same field names; a reply always has Error set when the
// request could not be answered.

// MaxQueryIDs bounds the ids of one get or liked request.
const MaxQueryIDs = 10_000

// MaxPage bounds the limit of a paged list request.
const MaxPage = 1_000

// GetRequest asks tally.get.<family> for the counters of many ids.
type GetRequest struct {
	IDs []ID `json:"ids"`
}

// GetReply holds counts in the order the ids were asked; unknown ids are zeros.
//
// Unavailable lists, in the order asked, the ids whose partition could not answer within
// the request timeout: owned by no process for a moment during a hand-over, or its owner
// did not answer. Their Counts entries are nil (null in JSON), never zeros; every other
// id is counted as usual. A reply in which no partition could answer is an Error instead.
type GetReply struct {
	Fields      []string   `json:"fields,omitempty"`
	Counts      [][]uint64 `json:"counts,omitempty"`
	Unavailable []ID       `json:"unavailable,omitempty"`
	Error       string     `json:"error,omitempty"`
}

// Change is published on tally.chg.<family>.<p> after a flush: the new values of every
// id that changed. A consumer keeps an exact mirror by taking the last value per id.
type Change struct {
	IDs    []ID       `json:"ids"`
	Fields []string   `json:"fields"`
	Counts [][]uint64 `json:"counts"`
}

// LikedRequest asks tally.liked whether uid liked each of posts.
type LikedRequest struct {
	UID   ID   `json:"uid"`
	Posts []ID `json:"posts"`
}

// LikedReply answers in the order the posts were asked.
type LikedReply struct {
	Liked []bool `json:"liked,omitempty"`
	Error string `json:"error,omitempty"`
}

// ListRequest asks for one page of a relation list, newest first: the posts a user
// liked (tally.likes.user, uid), the users who liked a post (tally.likes.post, post), whom
// a user follows (tally.following, uid) or who follows them (tally.followers, uid).
// Before is the Next cursor of the previous page; empty asks for the first page.
type ListRequest struct {
	UID    ID     `json:"uid,omitempty"`
	Post   ID     `json:"post,omitempty"`
	Limit  int    `json:"limit,omitempty"`
	Before string `json:"before,omitempty"`
}

// ListReply is one page: ids with the time (ms) each relation was made, and the cursor
// of the next page (empty on the last page).
type ListReply struct {
	IDs   []any   `json:"ids,omitempty"`
	TS    []int64 `json:"ts,omitempty"`
	Next  string  `json:"next,omitempty"`
	Error string  `json:"error,omitempty"`
}

// UnreadRequest asks tally.unread for one user's unread counts, or many users' (UIDs).
type UnreadRequest struct {
	UID  ID   `json:"uid,omitempty"`
	UIDs []ID `json:"uids,omitempty"`
}

// Unread is one user's unread counts: notifications by kind, system notices not yet
// read, and new posts in the feed since the last feed read.
type Unread struct {
	Comment uint64 `json:"comment"`
	Mention uint64 `json:"mention"`
	Like    uint64 `json:"like"`
	DM      uint64 `json:"dm"`
	System  uint64 `json:"system"`
	Feed    uint64 `json:"feed"`
}

// UnreadReply answers a single-user request in the embedded Unread and a many-user
// request in Users, in the order asked.
type UnreadReply struct {
	Unread
	Users []Unread `json:"users,omitempty"`
	Error string   `json:"error,omitempty"`
}

// HealthReply answers tally.health: whether every partition has applied everything in
// its stream, and the lag of those that have not. tally.health is answered by the
// process owning the event stages, for the whole prefix: its stages, its counter
// partitions and every other counter partition asked of its owner (one owned by no
// process is lagging). A process's /healthz is the same for its own partitions only.
type HealthReply struct {
	OK         bool `json:"ok"`
	Partitions int  `json:"partitions"` // the configured partition count
	// Checked is the number of consumers examined: each event stage and one counter
	// worker per family and partition (of this process only, for /healthz).
	Checked int               `json:"checked"`
	Lagging map[string]uint64 `json:"lagging,omitempty"`
	Error   string            `json:"error,omitempty"`
}
