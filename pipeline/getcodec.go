package pipeline

import "github.com/vmihailenco/msgpack/v5/msgpcode"

// A get's request and reply in MessagePack, written and read without reflection: every
// get of the Go client and of the query service went through msgpack's reflection
// both ways: 168 of the 354 allocations of a 20-id get. AppendGetRequest and AppendGetReply
// write the bytes reflection writes (a map of the non-empty fields, in their order; see
// TestGetCodecAsReflection); readGetRequest and readGetReply read the common forms, and
// whatever they do not take (the array form, a field of another type, an unknown
// request field, a malformed payload) is read again by reflection, which says why it
// is refused (DecodeRequest) or skips what a newer tallyd added (UnmarshalReply).

// AppendGetRequest appends r as Marshal writes it.
func AppendGetRequest(dst []byte, r *GetRequest) []byte {
	dst = appendMapLen(dst, count(true, r.Exact, r.Window != ""))
	dst = appendIDs(appendString(dst, "ids"), r.IDs) // never omitted
	if r.Exact {
		dst = append(appendString(dst, "exact"), msgpcode.True)
	}
	if r.Window != "" {
		dst = appendString(appendString(dst, "window"), r.Window)
	}
	return dst
}

// AppendGetReply appends r as Marshal writes it.
func AppendGetReply(dst []byte, r *GetReply) []byte {
	dst = appendMapLen(dst, count(len(r.Fields) > 0, len(r.Counts) > 0, r.Window != "", len(r.Changes) > 0,
		len(r.Unavailable) > 0, len(r.Stale) > 0, len(r.Estimated) > 0, r.Error != "", r.Code != ""))
	if len(r.Fields) > 0 {
		dst = appendStrings(appendString(dst, "fields"), r.Fields)
	}
	if len(r.Counts) > 0 {
		dst = appendUintRows(appendString(dst, "counts"), r.Counts)
	}
	if r.Window != "" {
		dst = appendString(appendString(dst, "window"), r.Window)
	}
	if len(r.Changes) > 0 {
		dst = appendArrayLen(appendString(dst, "changes"), len(r.Changes))
		for _, row := range r.Changes {
			if row == nil {
				dst = append(dst, msgpcode.Nil)
				continue
			}
			dst = appendArrayLen(dst, len(row))
			for _, v := range row {
				dst = appendFixed(dst, msgpcode.Int64, uint64(v), 8) // as Encoder.EncodeInt64
			}
		}
	}
	if len(r.Unavailable) > 0 {
		dst = appendIDs(appendString(dst, "unavailable"), r.Unavailable)
	}
	if len(r.Stale) > 0 {
		dst = appendArrayLen(appendString(dst, "stale"), len(r.Stale))
		for i := range r.Stale {
			dst = appendStale(dst, &r.Stale[i])
		}
	}
	if len(r.Estimated) > 0 {
		dst = appendStrings(appendString(dst, "estimated"), r.Estimated)
	}
	if r.Error != "" {
		dst = appendString(appendString(dst, "error"), r.Error)
	}
	if r.Code != "" {
		dst = appendString(appendString(dst, "code"), r.Code)
	}
	return dst
}

// Size is at least the bytes r takes encoded (AppendGetReply) when its strings are
// shorter than 32 bytes (field names, windows, codes; an error may be longer).
func (r *GetReply) Size() int {
	n := 96 + 9*len(r.Unavailable) + len(r.Window) + len(r.Error) + len(r.Code) // 96: the names, the heads
	for _, fs := range [2][]string{r.Fields, r.Estimated} {
		for _, f := range fs {
			n += 2 + len(f)
		}
	}
	for _, row := range r.Counts {
		n += 3 + 9*len(row)
	}
	for _, row := range r.Changes {
		n += 3 + 9*len(row)
	}
	for _, s := range r.Stale {
		n += 64 + 9*(len(s.IDs)+len(s.At))
	}
	return n
}

func appendStale(dst []byte, s *Stale) []byte {
	dst = appendMapLen(dst, count(true, true, true, s.BehindMsgs != 0))
	dst = appendIDs(appendString(dst, "ids"), s.IDs)
	dst = appendString(dst, "at")
	if s.At == nil {
		dst = append(dst, msgpcode.Nil)
	} else {
		dst = appendArrayLen(dst, len(s.At))
		for _, v := range s.At {
			dst = appendInt(dst, int64(v)) // an int as Encoder.EncodeInt writes it
		}
	}
	dst = appendFixed(appendString(dst, "behind_ms"), msgpcode.Int64, uint64(s.BehindMs), 8)
	if s.BehindMsgs != 0 {
		dst = appendFixed(appendString(dst, "behind_msgs"), msgpcode.Uint64, s.BehindMsgs, 8)
	}
	return dst
}

// appendIDs appends ids as reflection writes a []ID: nil as nil, each id compact.
func appendIDs(dst []byte, ids []ID) []byte {
	if ids == nil {
		return append(dst, msgpcode.Nil)
	}
	dst = appendArrayLen(dst, len(ids))
	for _, id := range ids {
		dst = appendUint(dst, uint64(id))
	}
	return dst
}

func appendStrings(dst []byte, ss []string) []byte {
	dst = appendArrayLen(dst, len(ss))
	for _, s := range ss {
		dst = appendString(dst, s)
	}
	return dst
}

// count is how many of full are true: the fields a map holds.
func count(full ...bool) int {
	n := 0
	for _, f := range full {
		if f {
			n++
		}
	}
	return n
}

// readGetRequest reads a get request in its map form, with the fields GetRequest has.
func (r *mpReader) readGetRequest(v *GetRequest) error {
	return r.readMap(func(name []byte) error {
		switch string(name) {
		case "ids":
			return r.ids(&v.IDs)
		case "exact":
			return r.exactBool(&v.Exact)
		case "window":
			return r.exactString(&v.Window)
		}
		return errNotFast
	})
}

// readGetReply reads a get reply in its map form; a field it does not know is skipped, as
// UnmarshalReply skips it.
func (r *mpReader) readGetReply(v *GetReply) error {
	return r.readMap(func(name []byte) error {
		switch string(name) {
		case "fields":
			return r.strings(&v.Fields)
		case "counts":
			return r.uintRows(&v.Counts)
		case "window":
			return r.exactString(&v.Window)
		case "changes":
			return r.intRows(&v.Changes)
		case "unavailable":
			return r.ids(&v.Unavailable)
		case "stale":
			return r.stales(&v.Stale)
		case "estimated":
			return r.strings(&v.Estimated)
		case "error":
			return r.exactString(&v.Error)
		case "code":
			return r.exactString(&v.Code)
		}
		return r.skip()
	})
}

// readMap reads a map's fields, each value by field, given its name.
func (r *mpReader) readMap(field func(name []byte) error) error {
	n, err := r.mapHead()
	if err != nil {
		return err
	}
	for range n {
		name, err := r.str()
		if err != nil {
			return err
		}
		if err := field(name); err != nil {
			return err
		}
	}
	return nil
}

func (r *mpReader) stales(out *[]Stale) error {
	return readList(r, out, func(s *Stale) error {
		return r.readMap(func(name []byte) error {
			switch string(name) {
			case "ids":
				return r.ids(&s.IDs)
			case "at":
				var at []int64
				if err := r.ints(&at); err != nil || at == nil {
					return err
				}
				s.At = make([]int, len(at))
				for j, v := range at {
					s.At[j] = int(v)
				}
				return nil
			case "behind_ms":
				var err error
				s.BehindMs, err = r.exactInt()
				return err
			case "behind_msgs":
				u, err := r.exactInt()
				s.BehindMsgs = uint64(u)
				return err
			}
			return r.skip()
		})
	})
}

// mapHead reads the head of a map; any other value (nil, the array form of a struct) is
// left to reflection.
func (r *mpReader) mapHead() (int, error) {
	c, err := r.code()
	if err != nil {
		return 0, err
	}
	if !msgpcode.IsFixedMap(c) && c != msgpcode.Map16 && c != msgpcode.Map32 {
		return 0, errNotFast
	}
	return r.mapLenOf(c)
}

// cmpNil is what reading a list ends with once its head is read: err, or errNotFast for
// a nil list (reflection sets it as it likes).
func cmpNil(err error, n int) error {
	if err == nil && n < 0 {
		return errNotFast
	}
	return err
}

// ids reads a list of ids as []ID decodes; nil is left to reflection.
func (r *mpReader) ids(out *[]ID) error { return readList(r, out, r.id) }

// strings reads a list of strings; nil is left to reflection.
func (r *mpReader) strings(out *[]string) error { return readList(r, out, r.exactString) }

// readList reads a list, each value with read; nil is left to reflection.
func readList[T any](r *mpReader, out *[]T, read func(*T) error) error {
	n, err := r.arrayLen()
	if err != nil || n < 0 {
		return cmpNil(err, n)
	}
	*out = make([]T, n)
	for i := range *out {
		if err := read(&(*out)[i]); err != nil {
			return err
		}
	}
	return nil
}

// uintRows reads [][]uint64: each row a list of integers (a negative one left to
// reflection) or nil. The rows share one array.
func (r *mpReader) uintRows(out *[][]uint64) error {
	n, err := r.arrayLen()
	if err != nil || n < 0 {
		return cmpNil(err, n)
	}
	rows := make([][]uint64, n)
	var flat []uint64
	for i := range rows {
		m, err := r.arrayLen()
		if err != nil {
			return err
		}
		switch {
		case m < 0:
			continue
		case m == 0:
			rows[i] = []uint64{} // as reflection reads it: empty, not nil
			continue
		}
		if len(flat) < m {
			flat = make([]uint64, m*(n-i)) // as many again for each row left
		}
		rows[i], flat = flat[:m:m], flat[m:]
		for j := range rows[i] {
			c, err := r.code()
			if err != nil {
				return err
			}
			v, ok, err := r.integer(c)
			switch {
			case err != nil:
				return err
			case !ok || v < 0 && c != msgpcode.Uint64:
				return errNotFast
			}
			rows[i][j] = uint64(v)
		}
	}
	*out = rows
	return nil
}

// intRows reads [][]int64: each row a list of integers or nil.
func (r *mpReader) intRows(out *[][]int64) error {
	n, err := r.arrayLen()
	if err != nil || n < 0 {
		return cmpNil(err, n)
	}
	rows := make([][]int64, n)
	for i := range rows {
		if err := r.ints(&rows[i]); err != nil {
			return err
		}
	}
	*out = rows
	return nil
}

// ints reads a list of integers; nil leaves *out nil.
func (r *mpReader) ints(out *[]int64) error {
	n, err := r.arrayLen()
	if err != nil || n < 0 {
		return err
	}
	*out = make([]int64, n)
	for i := range *out {
		if (*out)[i], err = r.exactInt(); err != nil {
			return err
		}
	}
	return nil
}

// exactInt reads an integer of any MessagePack form; anything else is left to
// reflection.
func (r *mpReader) exactInt() (int64, error) {
	c, err := r.code()
	if err != nil {
		return 0, err
	}
	v, ok, err := r.integer(c)
	if err == nil && !ok {
		err = errNotFast
	}
	return v, err
}

// exactBool reads true or false; anything else is left to reflection.
func (r *mpReader) exactBool(out *bool) error {
	c, err := r.code()
	switch {
	case err != nil:
		return err
	case c == msgpcode.True || c == msgpcode.False:
		*out = c == msgpcode.True
		return nil
	}
	return errNotFast
}

// exactString reads a string; anything else (nil, bytes) is left to reflection.
func (r *mpReader) exactString(out *string) error {
	c, err := r.code()
	if err != nil {
		return err
	}
	if c == msgpcode.Bin8 || c == msgpcode.Bin16 || c == msgpcode.Bin32 {
		return errNotFast
	}
	n, ok, err := r.strLen(c)
	if err == nil && !ok {
		err = errNotFast
	}
	if err != nil {
		return err
	}
	b, err := r.bytes(uint64(max(n, 0)))
	*out = string(b)
	return err
}

// skip passes over one value of any kind.
func (r *mpReader) skip() error {
	rest, err := skipMsgpack(r.b[r.i:], 1)
	if err != nil {
		return err
	}
	r.i = len(r.b) - len(rest)
	return nil
}

// The unread request and reply (a user's badge), the same way.

// AppendUnreadRequest appends r as Marshal writes it.
func AppendUnreadRequest(dst []byte, r *UnreadRequest) []byte {
	dst = appendMapLen(dst, count(r.UID != 0, len(r.UIDs) > 0))
	if r.UID != 0 {
		dst = appendUint(appendString(dst, "uid"), uint64(r.UID))
	}
	if len(r.UIDs) > 0 {
		dst = appendIDs(appendString(dst, "uids"), r.UIDs)
	}
	return dst
}

// unreadFields are Unread's fields, in their order.
var unreadFields = [...]string{"comment", "mention", "like", "dm", "system", "feed"}

// counts are u's fields, in unreadFields' order.
func (u *Unread) counts() [len(unreadFields)]*uint64 {
	return [...]*uint64{&u.Comment, &u.Mention, &u.Like, &u.DM, &u.System, &u.Feed}
}

// appendUnreadFields appends u's fields, each as a full uint64 as reflection writes it.
func appendUnreadFields(dst []byte, u *Unread) []byte {
	for i, v := range u.counts() {
		dst = appendFixed(appendString(dst, unreadFields[i]), msgpcode.Uint64, *v, 8)
	}
	return dst
}

// AppendUnreadReply appends r as Marshal writes it: Unread's fields inline.
func AppendUnreadReply(dst []byte, r *UnreadReply) []byte {
	dst = appendMapLen(dst, len(unreadFields)+count(len(r.Users) > 0, r.Error != "", r.Code != ""))
	dst = appendUnreadFields(dst, &r.Unread)
	if len(r.Users) > 0 {
		dst = appendArrayLen(appendString(dst, "users"), len(r.Users))
		for i := range r.Users {
			dst = appendUnreadFields(appendMapLen(dst, len(unreadFields)), &r.Users[i])
		}
	}
	if r.Error != "" {
		dst = appendString(appendString(dst, "error"), r.Error)
	}
	if r.Code != "" {
		dst = appendString(appendString(dst, "code"), r.Code)
	}
	return dst
}

// readUnreadRequest reads an unread request in its map form, with the fields it has.
func (r *mpReader) readUnreadRequest(v *UnreadRequest) error {
	return r.readMap(func(name []byte) error {
		switch string(name) {
		case "uid":
			return r.id(&v.UID)
		case "uids":
			return r.ids(&v.UIDs)
		}
		return errNotFast
	})
}

// readUnreadField reads the field of Unread called name into u, and reports whether it
// is one.
func (r *mpReader) readUnreadField(u *Unread, name []byte) (bool, error) {
	for i, f := range unreadFields {
		if string(name) == f {
			c, err := r.code()
			if err != nil {
				return true, err
			}
			v, ok, err := r.integer(c)
			switch {
			case err != nil:
				return true, err
			case !ok || v < 0 && c != msgpcode.Uint64:
				return true, errNotFast
			}
			*u.counts()[i] = uint64(v)
			return true, nil
		}
	}
	return false, nil
}

// readUnreadReply reads an unread reply in its map form; a field it does not know is
// skipped.
func (r *mpReader) readUnreadReply(v *UnreadReply) error {
	return r.readMap(func(name []byte) error {
		if ok, err := r.readUnreadField(&v.Unread, name); ok {
			return err
		}
		switch string(name) {
		case "users":
			return readList(r, &v.Users, func(u *Unread) error {
				return r.readMap(func(name []byte) error {
					if ok, err := r.readUnreadField(u, name); ok {
						return err
					}
					return r.skip()
				})
			})
		case "error":
			return r.exactString(&v.Error)
		case "code":
			return r.exactString(&v.Code)
		}
		return r.skip()
	})
}
