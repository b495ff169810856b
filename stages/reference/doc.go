// Package reference is Tally's rules as a plain model, for tests only: every event a
// producer stored, applied one at a time in the events stream's order (its place: the
// stream sequence, then the index in a batch), to maps. What Tally answers — counts,
// relations, lists, unread — must equal what the model answers for the same stored
// stream, whatever partition, hop or batch carried each event, in whatever order they
// arrived, through kills, restarts and lost publishes.
//
// The rules, as docs/contract.md states them:
//   - A relation (like, comment, follow) is made by the first "on" event after the last
//     "off" one; making it again changes nothing, undoing it when it is not made changes
//     nothing. Its time (lists are newest first by it) and place are those of that first
//     "on" event.
//   - A like or comment of another user's post notifies the post's owner (as given by the
//     event that made it), placed where the relation was made; undoing the relation takes
//     the notification back. Mentions and messages notify their target.
//   - Unread of a kind is the notifications placed after the user's last read of it;
//     system unread the notices stored after the last system read; feed unread the posts
//     of the accounts followed, placed after both the follow and the last feed read.
//   - Counters never go below zero (see Add).
//
// It must never import stages/event: it is what the event stage is checked against.
package reference
