package event

// Unread by the events stream's order. Every rule compares places in the stream
// (pipeline.Event.Seq), never times, and every unread counter of a user changes only in
// the user's own partition, which applies its own stream in order: a hop batch from
// another partition is published after that partition committed the events it carries,
// so its own place in the stream is after each of them, and the receiving partition has
// applied every event of its own stream placed before it. What it has not seen yet is a
// read (or follow, unfollow) forwarded from another partition's batch, which may come
// after events placed later than itself; the rules below make those exact too.
//
//   - A notification of kind k for user O, placed at P, is applied in O's partition
//     (handed there as a notify event when it happens elsewhere). It counts if P is
//     after O's last read of k, and is recorded (n|O|k|P) until a read covers it.
//   - A read of k placed at R, later than O's last read of k, becomes the last read. A
//     read from the partition's own stream covers everything the partition applied
//     before it (all placed before R): the counter is set to 0. A read handed over from
//     another partition sets it to the recorded notifications placed after R.
//   - Feed: a post by an author with at most FanoutLimit followers is pushed: announced
//     (a push event) to every partition, which records it (h|q|author|P) and adds one to
//     each of its own users following the author since before P who have not read
//     their feed after P. A follow placed at F adds the recorded posts after both F and
//     the last feed read (they reached the partition before the follow did); an
//     unfollow takes back the same set, which is exactly what was counted for the
//     reader; a feed read handed over recounts them per followee. Pulled posts (above
//     the limit) are counted when a reader asks, from the post index (author, place).
//   - A system notice placed at S is recorded by every partition (z|q|S); a read of
//     system records its place, and unread system is the notices recorded after it.
//
// The rules, a file each: notify.go (notifications), read.go (reads, and a feed read's
// recount), post.go (posts, pushed or pulled, and their arrival in every partition),
// follow.go (follows and unfollows: the author's follower list and the reader's feed).
