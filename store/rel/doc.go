// Package rel is the state of one relation — a like, a comment, a follow — kept by the
// places of the events that made and undid it in the events stream, so that the events
// of a relation applied in any order of arrival end exactly where applying them in the
// stream's order ends.
//
// Arrival order differs from the stream's when a relation's events reach its partition
// by different roads: one sent directly on the user's subject, another inside a batch
// stored on another partition's subject and handed over later. The state is a
// last-writer-wins register by place, which also remembers where the relation was made:
// the first "on" after the last "off". That place is what lists are ordered by (its time)
// and where the relation's notification is placed; a late event may move it.
//
// The package knows nothing of Badger or NATS: store/cold keeps the encoded states and
// stages/event derives counts, lists and notifications from what Apply changed.
package rel
