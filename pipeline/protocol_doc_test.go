package pipeline_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tally-dev/tally/pipeline"
)

// docTypes are the payload types docs/protocol.md's examples name.
var docTypes = map[string]func() any{
	"GetRequest":    func() any { return &pipeline.GetRequest{} },
	"GetReply":      func() any { return &pipeline.GetReply{} },
	"TopRequest":    func() any { return &pipeline.TopRequest{} },
	"TopReply":      func() any { return &pipeline.TopReply{} },
	"LikedRequest":  func() any { return &pipeline.LikedRequest{} },
	"LikedReply":    func() any { return &pipeline.LikedReply{} },
	"ListRequest":   func() any { return &pipeline.ListRequest{} },
	"ListReply":     func() any { return &pipeline.ListReply{} },
	"UnreadRequest": func() any { return &pipeline.UnreadRequest{} },
	"UnreadReply":   func() any { return &pipeline.UnreadReply{} },
	"HealthRequest": func() any { return &struct{}{} }, // tally.health reads no field
	"HealthReply":   func() any { return &pipeline.HealthReply{} },
	"AuditRequest":  func() any { return &pipeline.AuditRequest{} },
	"AuditReply":    func() any { return &pipeline.AuditReply{} },
}

// docExample is one marked example of the doc: what its mark says it is, and its text.
type docExample struct {
	line int
	mark []string // "request GetRequest", "event like", …, split on spaces
	text string
}

var docMark = regexp.MustCompile(`^<!-- (.+) -->$`)

// docExamples reads the marked examples of the doc at path; a JSON block without a mark
// is an error, so that no example escapes the test.
func docExamples(t *testing.T, path string) []docExample {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var out []docExample
	var mark []string
	markLine := 0
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if m := docMark.FindStringSubmatch(l); m != nil {
			mark, markLine = strings.Fields(m[1]), i+1
			continue
		}
		switch {
		case strings.HasPrefix(l, "```"):
			start := i
			var body []string
			for i++; i < len(lines) && lines[i] != "```"; i++ {
				body = append(body, lines[i])
			}
			if mark == nil {
				if l == "```json" {
					t.Errorf("%s:%d: a JSON block without a mark saying what it is", path, start+1)
				}
				continue
			}
			out = append(out, docExample{line: start + 1, mark: mark, text: strings.Join(body, "\n")})
			mark = nil
		case mark != nil && mark[0] == "partitions":
			var rows []string
			for ; i < len(lines) && strings.HasPrefix(lines[i], "|"); i++ {
				rows = append(rows, lines[i])
			}
			out = append(out, docExample{line: markLine, mark: mark, text: strings.Join(rows, "\n")})
			mark = nil
		case mark != nil && strings.TrimSpace(l) != "":
			t.Errorf("%s:%d: a mark %v followed by text, not an example", path, markLine, mark)
			mark = nil
		}
	}
	return out
}

// Every example of docs/protocol.md is what the code reads and writes: events decode as
// a tallyd decodes them, requests as the query server does, replies and change events
// strictly (a field the code does not have fails), a bad request's error is the text the
// server answers, a dead letter's error the one its event gets, and the partitions are
// pipeline.PartitionOf's.
func TestProtocolDoc(t *testing.T) {
	const path = "../docs/protocol.md"
	fams := pipeline.Families(pipeline.DefaultFamilies())
	var refused error // the last bad request's error, for the error reply that follows
	seen := map[string]int{}
	for _, ex := range docExamples(t, path) {
		where := fmt.Sprintf("%s:%d (%s)", path, ex.line, strings.Join(ex.mark, " "))
		data, asJSON := []byte(ex.text), true
		mark := ex.mark
		if mark[0] == "msgpack" {
			b, err := hex.DecodeString(strings.Join(strings.Fields(ex.text), ""))
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			data, asJSON, mark = b, false, mark[1:]
		}
		seen[mark[0]]++
		arg := ""
		if len(mark) > 1 {
			arg = mark[1]
		}
		if err := checkDocExample(mark[0], arg, data, asJSON, fams, &refused); err != nil {
			t.Errorf("%s: %v", where, err)
		}
	}
	for _, kind := range []string{"event", "request", "bad-request", "reply", "change", "dead-letter", "partitions"} {
		if seen[kind] == 0 {
			t.Errorf("%s has no %s example", path, kind)
		}
	}
}

func checkDocExample(kind, arg string, data []byte, asJSON bool, fams pipeline.Families, refused *error) error {
	newOf := func() (any, error) {
		mk, ok := docTypes[arg]
		if !ok {
			return nil, fmt.Errorf("no payload type %q", arg)
		}
		return mk(), nil
	}
	switch kind {
	case "event":
		good, bad, err := pipeline.DecodeEvents(arg, data, nil, fams)
		if err == nil && len(bad) > 0 {
			err = bad[0].Err
		}
		if err == nil && len(good) == 0 {
			err = errors.New("no event")
		}
		return err
	case "request":
		v, err := newOf()
		if err != nil {
			return err
		}
		return pipeline.DecodeRequest(data, asJSON, v)
	case "bad-request":
		v, err := newOf()
		if err != nil {
			return err
		}
		if *refused = pipeline.DecodeRequest(data, asJSON, v); *refused == nil {
			return errors.New("decodes: it is no bad request")
		}
		return nil
	case "reply":
		if arg == "error" {
			var r struct {
				Error string `json:"error"`
				Code  string `json:"code"`
			}
			if err := pipeline.Unmarshal(data, asJSON, &r); err != nil {
				return err
			}
			if r.Error == "" || pipeline.ErrorCode(pipeline.CodeError(r.Code)) != r.Code && r.Code != pipeline.CodeInternal {
				return fmt.Errorf("error %q with code %q", r.Error, r.Code)
			}
			if *refused != nil && r.Error != (*refused).Error() {
				return fmt.Errorf("error %q, but the server answers %q", r.Error, *refused)
			}
			*refused = nil
			return nil
		}
		v, err := newOf()
		if err != nil {
			return err
		}
		return pipeline.Unmarshal(data, asJSON, v)
	case "change":
		var c pipeline.Change
		if err := pipeline.Unmarshal(data, asJSON, &c); err != nil {
			return err
		}
		if !asJSON { // the bytes are tallyd's
			again, err := pipeline.Marshal(&c, false)
			if err != nil || !bytes.Equal(again, data) {
				return fmt.Errorf("tallyd encodes this change as % x (%v)", again, err)
			}
		}
		return nil
	case "dead-letter":
		var dl struct {
			Error   string              `json:"error"`
			Subject string              `json:"subject"`
			Seq     uint64              `json:"seq"`
			Index   int                 `json:"index"`
			Header  map[string][]string `json:"header"`
			Data    []byte              `json:"data"`
			Size    int                 `json:"size"`
		}
		if err := pipeline.Unmarshal(data, asJSON, &dl); err != nil {
			return err
		}
		tokens := strings.Split(dl.Subject, ".")
		typ, err := pipeline.NewSubjects("").StoredType(dl.Subject)
		if len(tokens) != 4 || err != nil {
			return fmt.Errorf("subject %q is not a stored event's (tally.ep.<p>.<type>): %v", dl.Subject, err)
		}
		if p, err := strconv.Atoi(tokens[2]); err != nil || p < 0 || p >= 16 {
			return fmt.Errorf("subject %q names no partition of 16", dl.Subject)
		}
		_, _, err = pipeline.DecodeEvents(typ, dl.Data, nil, fams)
		if err == nil || err.Error() != dl.Error {
			return fmt.Errorf("error %q, but the event gets %v", dl.Error, err)
		}
		return nil
	case "partitions":
		n, err := strconv.Atoi(arg)
		if err != nil {
			return err
		}
		for _, row := range strings.Split(string(data), "\n")[2:] {
			cells := strings.Split(strings.Trim(row, "| "), "|")
			id, err := pipeline.ParseID(strings.TrimSpace(cells[0]))
			if err != nil {
				return err
			}
			if got, want := strings.TrimSpace(cells[1]), strconv.Itoa(pipeline.PartitionOf(id, n)); got != want {
				return fmt.Errorf("id %s: partition %s of %d, want %s", id, got, n, want)
			}
		}
		return nil
	}
	return fmt.Errorf("unknown mark %q", kind)
}
