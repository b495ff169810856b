package pipeline

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// A client may ask a get of the process that serves its ids' partitions rather than of
// any process (1.9): a get on <prefix>.get.<family> answered by a process that serves
// some partitions and knows who serves others puts one process between the client and
// those others, two round trips in a row where one would do. So a get request with the
// header WhereHeader (any value) is answered with the same header naming, for each
// partition the answering process knows of, the token of the process that serves it
// (Where), and that process answers gets of the ids of its own partitions on
// <prefix>.get.<family>.at.<token> (Subjects.GetAt): the client splits a get by
// partition (PartitionOf) and asks each process once, in parallel. What a client
// learns is only ever a shortcut: a process asked there answers the ids of partitions
// it does not serve now (a hand-over) as Unavailable and never asks another, and the
// client asks those on <prefix>.get.<family> as before (docs/protocol.md).

// WhereHeader asks, in a get request, and answers, in its reply, where the partitions
// of the get's family are served: "<partitions>;<token>=<p>,<p>,…;<token>=…".
const WhereHeader = "Tally-Where"

// Where is which process serves each partition of a family, as one process knows it:
// At[p] is the token of the process serving partition p ("" when not known), len(At)
// the partition count.
type Where struct {
	At []string
}

// String encodes w as the value of WhereHeader.
func (w Where) String() string {
	b := strconv.AppendInt(make([]byte, 0, 16+len(w.At)*4), int64(len(w.At)), 10)
	for p, tok := range w.At {
		if tok == "" || slices.Index(w.At, tok) != p { // each token's group once, at its first
			continue
		}
		b = append(b, ';')
		b = append(b, tok...)
		sep := byte('=')
		for q := p; q < len(w.At); q++ {
			if w.At[q] == tok {
				b = append(b, sep)
				b = strconv.AppendInt(b, int64(q), 10)
				sep = ','
			}
		}
	}
	return string(b)
}

// maxWherePartitions bounds the partition count a WhereHeader may name.
const maxWherePartitions = 1 << 16

// ParseWhere reads the value of WhereHeader. A token is one subject token; a partition
// named twice, or past the count, is an error.
func ParseWhere(s string) (Where, error) {
	head, rest, _ := strings.Cut(s, ";")
	n, err := strconv.Atoi(head)
	if err != nil || n < 1 || n > maxWherePartitions {
		return Where{}, fmt.Errorf("%s %q: bad partition count", WhereHeader, s)
	}
	w := Where{At: make([]string, n)}
	for group := range strings.SplitSeq(rest, ";") {
		if group == "" && rest == "" {
			break
		}
		tok, ps, ok := strings.Cut(group, "=")
		if !ok || !ValidToken(tok) {
			return Where{}, fmt.Errorf("%s %q: bad token in %q", WhereHeader, s, group)
		}
		for ps := range strings.SplitSeq(ps, ",") {
			p, err := strconv.Atoi(ps)
			if err != nil || p < 0 || p >= n || w.At[p] != "" {
				return Where{}, fmt.Errorf("%s %q: bad partition %q", WhereHeader, s, ps)
			}
			w.At[p] = tok
		}
	}
	return w, nil
}

// ValidToken reports whether tok may be one token of a subject: not empty, without a
// dot, a wildcard or white space.
func ValidToken(tok string) bool {
	return tok != "" && !strings.ContainsAny(tok, ".*> \t\r\n")
}
