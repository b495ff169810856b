package pipeline

import "fmt"

// Audit is the subject of audits, answered by any process: it gathers the relations
// that counts are recounted from from every event partition's owner.
func (s Subjects) Audit() string { return s.join("audit") }

// MaxAuditSample bounds the posts and the users an audit samples.
const MaxAuditSample = 1_000

// AuditRequest asks <prefix>.audit to recount the like and comment counts of Posts and
// the follower and following counts of Users from the relations and compare them with
// the counters; Sample adds that many posts and users picked at random among those with
// relations. Repair corrects each drift found with an incr event (see RepairMsgID).
type AuditRequest struct {
	Posts  []ID `json:"posts,omitempty"`
	Users  []ID `json:"users,omitempty"`
	Sample int  `json:"sample,omitempty"`
	Repair bool `json:"repair,omitempty"`
}

// Drift is one counter that differs from its recount at a consistent point: Counter is
// what the counter holds, Relations what the relations make it. Tx is the transaction id
// of the repair, set when it was published and stored.
type Drift struct {
	Family    string `json:"family"`
	ID        ID     `json:"id"`
	Field     string `json:"field"`
	Counter   uint64 `json:"counter"`
	Relations uint64 `json:"relations"`
	Repaired  bool   `json:"repaired,omitempty"`
	Tx        string `json:"tx,omitempty"`
}

// Skipped is an id an audit could not compare at a consistent point (its counts kept
// moving, its partitions did not catch up, or its partition was unavailable): neither
// clean nor drifting, ask again later.
type Skipped struct {
	Family string `json:"family"`
	ID     ID     `json:"id"`
	Reason string `json:"reason"`
}

// AuditReply lists what an audit found. Checked counts the counters compared (ids times
// fields), skipped ones excluded; an id absent from Drift and Skipped is exact.
type AuditReply struct {
	Checked int       `json:"checked"`
	Posts   []ID      `json:"posts,omitempty"` // the posts audited, sampled ones included
	Users   []ID      `json:"users,omitempty"`
	Drift   []Drift   `json:"drift,omitempty"`
	Skipped []Skipped `json:"skipped,omitempty"`
	Error   string    `json:"error,omitempty"`
	Code    string    `json:"code,omitempty"`
}

// RepairMsgID names the incr event that repairs a drift. It is the drift itself — the
// counter, the id, the field, the value the counter held and the value the relations
// make — so that every audit that sees the same drift (two operators, a repair re-sent
// after a timeout) sends the same message, which JetStream stores once. A repaired
// counter holds the recount, so a later drift of the same counter is a different value
// pair and a different id; were the very same pair to drift again inside the duplicate
// window, its repair would be dropped, never counted twice, and the next audit finds it.
func RepairMsgID(family string, id ID, field string, counter, relations uint64) string {
	return fmt.Sprintf("audit.%s.%s.%d.%d.%d", family, field, id, counter, relations)
}
