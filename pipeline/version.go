package pipeline

// ProtocolVersion is the version of Tally's wire protocol: the subjects, the payloads
// of events, requests, replies and change events, and their field names
// (docs/protocol.md). It is what the query service announces to NATS micro and what
// every health reply carries, never the version of a binary.
//
// The rule that keeps old readers working: a minor version may add fields and
// subjects, and readers of replies and change events skip fields they do not know
// (UnmarshalReply); removing or renaming a field, changing its type or its meaning
// takes a new major version. Requests and events stay strict — a field the server does
// not know is a bad request or a dead-lettered event naming it — so a typo is never
// silently dropped; a client uses a newer request field only once every tallyd it talks
// to announces the minor version that brought it. Requests between tallyd processes
// (the part and standby subjects) are no client's: they skip unknown fields as replies
// do (DecodePeerRequest), so that a rolling upgrade may add one.
//
// 1.1 added this version to health replies, and the tolerance of unknown reply fields.
// 1.2 added reads from standbys: a get's ids whose partition has no owner may be
// answered by its standby and are then listed in GetReply.Stale with how far behind it
// was; GetRequest.Exact refuses that (those ids are unavailable, as in 1.1). A reader of
// 1.1 that does not know Stale takes such counts as exact.
// 1.3 added the post family's viewers, counted from views that carry a uid, and
// GetReply.Estimated, the fields whose counts may be estimates (viewers past 128).
// 1.4 added the window of a get (GetRequest.Window, GetReply.Window and Changes), where
// tallyd keeps windows (--windows), and the window changes of internal delta batches.
// 1.5 added trending: tally.top.<family> (TopRequest, TopReply), the ids whose field
// changed most over a window, exact.
// 1.6 added watched tops: TopRequest.Watch has the top published on
// <prefix>.topchg.<family>.<field>.<window>.<limit> each time it changes.
// 1.7 added HealthReply.Applied to the health of one partition that tallyd processes ask
// each other, so that tally.health is OK only when every partition is caught up at one
// moment (two looks finding each at the same place).
// 1.8 stores events under <prefix>.ep.<p>.<type>, without their key (StreamConfig's
// KeyedEvents): a dead letter's subject no longer names the key, and a tallyd before
// 1.8 refuses events stored so.
// 1.9 added gets asked of the process serving their partitions: a get request's
// WhereHeader is answered with where each partition is served, and the process of token
// answers the ids of its own partitions on <prefix>.get.<family>.at.<token> (GetAt).
const ProtocolVersion = "1.9"

// ServiceVersion is ProtocolVersion as a semantic version (major.minor.0), the version
// of the NATS micro service that answers the queries.
const ServiceVersion = ProtocolVersion + ".0"
