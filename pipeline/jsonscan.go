package pipeline

import (
	"math"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// The lexical part of the JSON codec (jsoncodec.go): numbers, strings and field names,
// checked and read as encoding/json's scanner and unquoting do.

// number reads the number at d.pos and returns its text.
func (d *jsonDecoder) number() ([]byte, error) {
	start := d.pos
	digits := func() int {
		from := d.pos
		for d.pos < len(d.data) && '0' <= d.data[d.pos] && d.data[d.pos] <= '9' {
			d.pos++
		}
		return d.pos - from
	}
	if d.peek() == '-' {
		d.pos++
	}
	switch c := d.peek(); {
	case c == '0':
		d.pos++
	case '1' <= c && c <= '9':
		digits()
	default:
		return nil, d.syntax("a digit")
	}
	if d.peek() == '.' {
		d.pos++
		if digits() == 0 {
			return nil, d.syntax("a digit after the decimal point")
		}
	}
	if c := d.peek(); c == 'e' || c == 'E' {
		d.pos++
		if c := d.peek(); c == '+' || c == '-' {
			d.pos++
		}
		if digits() == 0 {
			return nil, d.syntax("a digit in the exponent")
		}
	}
	return d.data[start:d.pos], nil
}

// parseUint parses decimal digits (as strconv.ParseUint: leading zeros allowed, no sign)
// within uint64.
func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		digit := uint64(c - '0')
		if v > (math.MaxUint64-digit)/10 {
			return 0, false
		}
		v = v*10 + digit
	}
	return v, true
}

// str reads the string at d.pos and returns it unquoted, and raw, its bytes between the
// quotes as sent. s is a slice of the payload when the string has no escapes and is
// valid UTF-8, else new.
func (d *jsonDecoder) str() (s, raw []byte, err error) {
	start := d.pos + 1
	for i := start; i < len(d.data); i++ {
		switch c := d.data[i]; {
		case c == '"':
			d.pos = i + 1
			return d.data[start:i], d.data[start:i], nil
		case c == '\\' || c < 0x20 || c >= utf8.RuneSelf:
			return d.strSlow(start, i)
		}
	}
	d.pos = len(d.data)
	return nil, nil, d.syntax("the end of a string")
}

// strSlow is str past the first byte that needs more than a copy: it checks the rest as
// encoding/json's scanner does (no control characters, known escapes) and unquotes it.
func (d *jsonDecoder) strSlow(start, i int) (s, raw []byte, err error) {
	for i < len(d.data) {
		switch c := d.data[i]; {
		case c == '"':
			d.pos = i + 1
			raw = d.data[start:i]
			return unquote(raw), raw, nil
		case c < 0x20:
			d.pos = i
			return nil, nil, d.syntax("a string without control characters")
		case c != '\\':
			i++
			continue
		}
		d.pos = i + 1
		switch d.peek() {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			i += 2
			continue
		case 'u':
		default:
			return nil, nil, d.syntax("an escape (one of \"\\/bfnrtu)")
		}
		for d.pos = i + 2; d.pos < i+6; d.pos++ {
			if c := d.peek(); !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return nil, nil, d.syntax("a hexadecimal digit of a \\u escape")
			}
		}
		i += 6
	}
	d.pos = len(d.data)
	return nil, nil, d.syntax("the end of a string")
}

// unquote returns the contents of a string that passed strSlow's checks, as
// encoding/json's unquoteBytes makes them.
func unquote(s []byte) []byte {
	r := 0
	for r < len(s) {
		c := s[r]
		if c == '\\' {
			break
		}
		if c < utf8.RuneSelf {
			r++
			continue
		}
		rr, size := utf8.DecodeRune(s[r:])
		if rr == utf8.RuneError && size == 1 {
			break
		}
		r += size
	}
	if r == len(s) {
		return s
	}
	b := make([]byte, r, len(s)+2*utf8.UTFMax)
	copy(b, s[:r])
	for r < len(s) {
		switch c := s[r]; {
		case c == '\\':
			switch s[r+1] {
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				rr := getu4(s[r:])
				r += 6
				if utf16.IsSurrogate(rr) {
					if dec := utf16.DecodeRune(rr, getu4(s[r:])); dec != unicode.ReplacementChar {
						r += 6
						b = utf8.AppendRune(b, dec)
						continue
					}
					rr = unicode.ReplacementChar
				}
				b = utf8.AppendRune(b, rr)
				continue
			default: // " \ /
				b = append(b, s[r+1])
			}
			r += 2
		case c < utf8.RuneSelf:
			b = append(b, c)
			r++
		default:
			rr, size := utf8.DecodeRune(s[r:])
			r += size
			b = utf8.AppendRune(b, rr)
		}
	}
	return b
}

// getu4 decodes \uXXXX at the start of s, or returns -1.
func getu4(s []byte) rune {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range s[2:6] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// appendFoldedName appends in folded as encoding/json folds field names to match them
// without regard to case: ASCII upper case, any other rune the smallest of its simple
// fold orbit.
func appendFoldedName(out, in []byte) []byte {
	for i := 0; i < len(in); {
		if c := in[i]; c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			out = append(out, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(in[i:])
		for {
			r2 := unicode.SimpleFold(r)
			if r2 <= r {
				r = r2
				break
			}
			r = r2
		}
		out = utf8.AppendRune(out, r)
		i += n
	}
	return out
}
