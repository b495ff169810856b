package pipeline

import (
	"errors"
	"time"
)

// Request and reply payloads of the query subjects. Each is a JSON object or a
// MessagePack map with the same field names; a reply always has Error set when the
// request could not be answered, and Code says which kind of failure it was (one of the
// Code constants), so that a caller acts on it without reading the text.

// MaxQueryIDs bounds the ids of one get or liked request.
const MaxQueryIDs = 10_000

// MaxPage bounds the limit of a paged list request.
const MaxPage = 1_000

// GetRequest asks tally.get.<family> for the counters of many ids.
//
// Exact (1.2) refuses answers from a standby: the ids of a partition that has no owner
// are then Unavailable, as before 1.2, rather than counted a moment behind (Stale).
type GetRequest struct {
	IDs   []ID `json:"ids"`
	Exact bool `json:"exact,omitempty"`
	// Window (1.4), when set, asks for the net change of each counter over the last 5
	// minutes, hour or day ("5m", "1h", "1d") instead of its value (docs/contract.md).
	Window string `json:"window,omitempty"`
}

// GetReply holds counts in the order the ids were asked; unknown ids are zeros.
//
// Unavailable lists, in the order asked, the ids whose partition could not answer within
// the request timeout: owned by no process for a moment during a hand-over, or its owner
// did not answer. Their Counts entries are nil (null in JSON), never zeros; every other
// id is counted as usual. A reply in which no partition could answer is an Error instead.
//
// Stale (1.2) lists the ids counted by a standby of their partition because no process
// owned it (a killed owner, until its standby takes it over): their counts are real but
// may miss the last moment's events, as each entry says. A request with Exact gets none.
//
// A windowed get (GetRequest.Window, 1.4) answers in Changes instead of Counts, signed
// (more unlikes than likes in the window is negative), and names the window it answers.
type GetReply struct {
	Fields      []string   `json:"fields,omitempty"`
	Counts      [][]uint64 `json:"counts,omitempty"`
	Window      string     `json:"window,omitempty"`
	Changes     [][]int64  `json:"changes,omitempty"`
	Unavailable []ID       `json:"unavailable,omitempty"`
	Stale       []Stale    `json:"stale,omitempty"`
	// Estimated (1.3) names the fields whose counts may be estimates: a post's viewers,
	// exact up to 128 distinct users and within 0.81 % (one standard error) past that.
	Estimated []string `json:"estimated,omitempty"`
	Error     string   `json:"error,omitempty"`
	Code      string   `json:"code,omitempty"`
}

// Stale is a group of ids of a get reply answered by one partition's standby, with how
// far behind its owner that standby was. At gives their positions in the request (from
// 0), so that a JavaScript client, which cannot hold every 64-bit id as a number, marks
// them by position as it marks unavailable ones by their null counts.
type Stale struct {
	IDs []ID  `json:"ids"`
	At  []int `json:"at"`
	// BehindMs is how long ago the oldest delta of the partition the standby had not
	// applied yet was stored, as it knew when it answered (0: it had applied every
	// delta stored); BehindMsgs how many stream messages it had still to apply. Events
	// the dead owner had not yet turned into deltas are not in either.
	BehindMs   int64  `json:"behind_ms"`
	BehindMsgs uint64 `json:"behind_msgs,omitempty"`
}

// MaxTop bounds the limit of a top request.
const MaxTop = 1_000

// DefaultTop is the limit of a top request that gives none.
const DefaultTop = 100

// TopRequest asks tally.top.<family> for the Limit ids (DefaultTop when 0, at most
// MaxTop) whose Field changed the most over Window ("5m", "1h" or "1d"): trending (1.5).
// Watch (1.6) also has the top published on Subjects.TopChanges, whole, each time it
// changes, for TopWatchFor after the request: a watcher asks again before that.
type TopRequest struct {
	Field  string `json:"field"`
	Window string `json:"window"`
	Limit  int    `json:"limit,omitempty"`
	Watch  bool   `json:"watch,omitempty"`
}

// TopWatchFor is how long a watched top is published after its last watch request.
const TopWatchFor = 30 * time.Second

// TopReply lists the ids best first, each with its net change over the window (Changes,
// positive: an id whose change is not is not trending), ties by the smaller id. It is
// exact: every partition ranks all its ids and the lists are merged; when a partition
// cannot answer, the reply is an error (unavailable), never a partial list.
type TopReply struct {
	Field   string  `json:"field,omitempty"`
	Window  string  `json:"window,omitempty"`
	IDs     []ID    `json:"ids,omitempty"`
	Changes []int64 `json:"changes,omitempty"`
	Error   string  `json:"error,omitempty"`
	Code    string  `json:"code,omitempty"`
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
	Code  string `json:"code,omitempty"`
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
	Code  string  `json:"code,omitempty"`
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
	Code  string   `json:"code,omitempty"`
}

// HealthReply answers tally.health: whether every partition has applied everything in
// its stream, and the lag of those that have not. tally.health is answered by any
// process, for the whole prefix: its event stages and counter partitions, and every
// other one asked of its owner (one owned by no process is lagging). A process's
// /healthz is the same for its own partitions only.
type HealthReply struct {
	OK         bool `json:"ok"`
	Partitions int  `json:"partitions"` // the configured partition count
	// Checked is the number of consumers examined: each event stage and one counter
	// worker per family and partition (of this process only, for /healthz).
	Checked int               `json:"checked"`
	Lagging map[string]uint64 `json:"lagging,omitempty"`
	// Ready is what a health check should look at: every partition checked has loaded
	// and is within the answering tallyd's --max-lag (MaxLag), while OK asks that every
	// one has applied all of its stream, which a steady load rarely allows.
	Ready  bool   `json:"ready"`
	MaxLag string `json:"max_lag,omitempty"`
	// NotReady names the partitions beyond MaxLag, still loading, or not answering.
	NotReady []string `json:"not_ready,omitempty"`
	// BehindMs is, per lagging partition, how long ago the oldest message it has not
	// applied yet was stored (milliseconds).
	BehindMs map[string]int64 `json:"behind_ms,omitempty"`
	// Version is the ProtocolVersion of the answering tallyd (empty before 1.1).
	Version string `json:"version,omitempty"`
	// Applied is, per partition checked, the last sequence of its stream it has applied,
	// in the replies tallyd processes send each other for one partition's health (1.7):
	// a partition found caught up twice at the same place applied nothing in between.
	Applied map[string]uint64 `json:"applied,omitempty"`
	Error   string            `json:"error,omitempty"`
	Code    string            `json:"code,omitempty"`
}

// Codes of a failed reply's Code field. A client maps each to the sentinel error of the
// same name (CodeError), so callers test a failure with errors.Is.
const (
	// CodeBadRequest: the request cannot be answered as sent (malformed, too many ids,
	// missing fields); sending it again fails the same way.
	CodeBadRequest = "bad_request"
	// CodeUnknownFamily: no family of that name is configured.
	CodeUnknownFamily = "unknown_family"
	// CodeUnavailable: the partitions that hold the answer are being handed over between
	// processes or did not answer in time; the same request may succeed shortly.
	CodeUnavailable = "unavailable"
	// CodeInternal: anything else (a failed disk read, say); see Error.
	CodeInternal = "internal"
)

// ErrorCode is the Code a reply carries for err.
func ErrorCode(err error) string {
	switch {
	case errors.Is(err, ErrUnknownFamily):
		return CodeUnknownFamily
	case errors.Is(err, ErrBadRequest), errors.Is(err, ErrBadEvent), errors.Is(err, ErrUnknownField), errors.Is(err, ErrTooMany):
		return CodeBadRequest
	case errors.Is(err, ErrUnavailable):
		return CodeUnavailable
	}
	return CodeInternal
}

// CodeError is the sentinel error of a reply's code, nil for CodeInternal and codes it
// does not know (from a newer server, say).
func CodeError(code string) error {
	switch code {
	case CodeBadRequest:
		return ErrBadRequest
	case CodeUnknownFamily:
		return ErrUnknownFamily
	case CodeUnavailable:
		return ErrUnavailable
	}
	return nil
}
