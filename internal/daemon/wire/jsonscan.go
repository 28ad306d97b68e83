package wire

import (
	"fmt"
	"net/http"
	"strconv"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/delayq/delayq/internal/task"
)

// A small JSON reader for the request bodies, written for the write
// path's cost (encoding/json with DisallowUnknownFields spent most of the
// daemon's CPU per task). It accepts exactly what encoding/json accepts
// (RFC 8259; nesting up to 10000 levels); FuzzDecodeTask checks it
// against encoding/json. One difference, on purpose: encoding/json turns
// invalid UTF-8 and unpaired \u surrogate escapes into U+FFFD, which
// makes two different ids one ("a\xff" and "a\xfe" both become "a\ufffd")
// and stores a payload GET cannot echo as JSON. The reader reports such a
// string instead (a 422 naming the field); nothing is ever repaired.
//
// Use: validate the whole body with scanOne, then walk it with a reader,
// which may then assume the syntax is right.

const maxDepth = 10000

// scanOne checks that b is exactly one JSON value with optional white
// space around it.
func scanOne(b []byte) *Error {
	i := skipWS(b, 0)
	if i == len(b) {
		return InvalidJSON("empty body: expected a JSON object")
	}
	end, msg := scanValue(b, i, 0)
	if msg != "" {
		return InvalidJSON(fmt.Sprintf("invalid JSON at byte %d: %s", end, msg))
	}
	if end = skipWS(b, end); end != len(b) {
		return InvalidJSON(fmt.Sprintf("invalid JSON at byte %d: trailing data after the value", end))
	}
	return nil
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanValue checks the value starting at b[i] (not white space) and
// returns the index after it, or the failing index and a message.
func scanValue(b []byte, i, depth int) (int, string) {
	if i >= len(b) {
		return i, "unexpected end of input"
	}
	switch c := b[i]; {
	case c == '"':
		return scanString(b, i)
	case c == '{' || c == '[':
		if depth >= maxDepth {
			return i, "nested too deeply"
		}
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		i = skipWS(b, i+1)
		if i < len(b) && b[i] == closer {
			return i + 1, ""
		}
		for {
			if c == '{' {
				if i >= len(b) || b[i] != '"' {
					return i, "expected a string (object key)"
				}
				var msg string
				if i, msg = scanString(b, i); msg != "" {
					return i, msg
				}
				if i = skipWS(b, i); i >= len(b) || b[i] != ':' {
					return i, "expected ':' after an object key"
				}
				i = skipWS(b, i+1)
			}
			var msg string
			if i, msg = scanValue(b, i, depth+1); msg != "" {
				return i, msg
			}
			i = skipWS(b, i)
			switch {
			case i >= len(b):
				return i, "unexpected end of input"
			case b[i] == ',':
				i = skipWS(b, i+1)
			case b[i] == closer:
				return i + 1, ""
			default:
				return i, fmt.Sprintf("expected ',' or '%c'", closer)
			}
		}
	case c == '-' || (c >= '0' && c <= '9'):
		return scanNumber(b, i)
	case c == 't':
		return scanLiteral(b, i, "true")
	case c == 'f':
		return scanLiteral(b, i, "false")
	case c == 'n':
		return scanLiteral(b, i, "null")
	}
	return i, fmt.Sprintf("invalid character %q looking for a value", b[i])
}

func scanLiteral(b []byte, i int, lit string) (int, string) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return i, "invalid literal (expected " + lit + ")"
	}
	return i + len(lit), ""
}

// scanString checks the string starting at b[i] == '"'.
func scanString(b []byte, i int) (int, string) {
	for i++; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1, ""
		case c == '\\':
			i++
			if i >= len(b) {
				return i, "unexpected end of input"
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(b)-i < 5 || !isHex(b[i+1]) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) {
					return i, `invalid \u escape`
				}
				i += 4
			default:
				return i, "invalid escape in a string"
			}
		case c < 0x20:
			return i, "control character in a string"
		}
	}
	return i, "unexpected end of input in a string"
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func scanNumber(b []byte, i int) (int, string) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return i, "invalid number"
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return i, "invalid number"
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return i, "invalid number"
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	return i, ""
}

// reader walks a body that scanOne accepted.
type reader struct {
	b []byte
	i int
	// badKey is set by object while fn runs for a member whose name is
	// not valid UTF-8 (the key fn gets is then a repaired copy, for
	// messages only).
	badKey bool
}

// kind names the JSON type of the value at r.i, for messages.
func (r *reader) kind() string {
	switch r.b[r.i] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	}
	return "number"
}

func typeError(field, want string, r *reader) *Error {
	return InvalidTask(fmt.Sprintf("%s: expected %s, got JSON %s", field, want, r.kind()))
}

// null consumes a null literal at r.i.
func (r *reader) null() bool {
	if r.b[r.i] == 'n' {
		r.i += 4
		return true
	}
	return false
}

// skip passes over the value at r.i.
func (r *reader) skip() []byte {
	start := r.i
	r.i, _ = scanValue(r.b, r.i, 0)
	return r.b[start:r.i]
}

// object calls fn for each member of the object at r.i with r at the
// member's value; fn must consume the value. The caller has checked that
// the value at r.i is an object (object returns nil for any other value).
func (r *reader) object(fn func(key []byte) *Error) *Error {
	if r.b[r.i] != '{' {
		return nil // caller checked
	}
	r.i = skipWS(r.b, r.i+1)
	if r.b[r.i] == '}' {
		r.i++
		return nil
	}
	var buf [32]byte
	for {
		key, ok := r.rawString(buf[:0])
		r.badKey = !ok
		r.i = skipWS(r.b, r.i)
		r.i = skipWS(r.b, r.i+1) // ':'
		e := fn(key)
		r.badKey = false
		if e != nil {
			return e
		}
		r.i = skipWS(r.b, r.i)
		if r.b[r.i] == '}' {
			r.i++
			return nil
		}
		r.i = skipWS(r.b, r.i+1) // ','
	}
}

// str reads the string at r.i (for field), or reports a type error or a
// string that is not valid UTF-8.
func (r *reader) str(field string) (string, *Error) {
	if r.b[r.i] != '"' {
		e := typeError(field, "a string", r)
		r.skip()
		return "", e
	}
	s, ok := r.rawString(nil)
	if !ok {
		return "", errNotUTF8(field)
	}
	return string(s), nil
}

// errNotUTF8 is the answer for a string field that is not valid UTF-8.
func errNotUTF8(field string) *Error {
	return InvalidTask(field + `: not valid UTF-8 (invalid bytes or an unpaired \u surrogate escape)`)
}

// rawString reads the string at r.i, unescaped, into buf (or a sub-slice
// of the body when it needs no unescaping). ok is false when the string
// holds invalid UTF-8 or an unpaired surrogate escape; the bytes returned
// then have U+FFFD in their place (for messages only).
func (r *reader) rawString(buf []byte) ([]byte, bool) {
	start := r.i + 1
	end, _ := scanString(r.b, r.i)
	r.i = end
	s := r.b[start : end-1]
	plain := true
	for _, c := range s {
		if c == '\\' || c >= utf8.RuneSelf {
			plain = false
			break
		}
	}
	if plain {
		return s, true
	}
	return unquote(buf, s)
}

// unquote unescapes a string body. Invalid UTF-8 and unpaired surrogates
// become U+FFFD as encoding/json does, and ok is false.
func unquote(out, s []byte) (_ []byte, ok bool) {
	ok = true
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\':
			switch s[i+1] {
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				rr := hex4(s[i+2:])
				i += 6
				if utf16.IsSurrogate(rr) {
					if i+6 <= len(s) && s[i] == '\\' && s[i+1] == 'u' {
						if dec := utf16.DecodeRune(rr, hex4(s[i+2:])); dec != unicode.ReplacementChar {
							out = utf8.AppendRune(out, dec)
							i += 6
							continue
						}
					}
					rr, ok = unicode.ReplacementChar, false
				}
				out = utf8.AppendRune(out, rr)
				continue
			default: // " \ /
				out = append(out, s[i+1])
			}
			i += 2
		case c < utf8.RuneSelf:
			out = append(out, c)
			i++
		default:
			rr, size := utf8.DecodeRune(s[i:])
			if rr == utf8.RuneError && size == 1 {
				out, ok = utf8.AppendRune(out, unicode.ReplacementChar), false
			} else {
				out = append(out, s[i:i+size]...)
			}
			i += size
		}
	}
	return out, ok
}

// validText reports whether the JSON value v (accepted by scanOne) is
// valid UTF-8 with every \u surrogate escape paired, i.e. whether each
// of its strings decodes without a replacement.
func validText(v []byte) bool {
	if !utf8.Valid(v) {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] != '\\' {
			continue
		}
		// Syntax is checked: a backslash is in a string and starts an
		// escape.
		if v[i+1] != 'u' {
			i++
			continue
		}
		rr := hex4(v[i+2:])
		i += 5
		switch {
		case rr >= 0xDC00 && rr <= 0xDFFF:
			return false // a low surrogate first
		case rr >= 0xD800 && rr <= 0xDBFF:
			if i+6 >= len(v) || v[i+1] != '\\' || v[i+2] != 'u' {
				return false
			}
			if lo := hex4(v[i+3:]); lo < 0xDC00 || lo > 0xDFFF {
				return false
			}
			i += 6
		}
	}
	return true
}

func hex4(s []byte) rune {
	var r rune
	for _, c := range s[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		default:
			c = c - 'A' + 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// integer reads the integer at r.i (for field).
func (r *reader) integer(field string) (int, *Error) {
	if c := r.b[r.i]; c != '-' && (c < '0' || c > '9') {
		e := typeError(field, "an integer", r)
		r.skip()
		return 0, e
	}
	num := r.skip()
	n, err := strconv.ParseInt(string(num), 10, 64)
	if err != nil {
		return 0, InvalidTask(fmt.Sprintf("%s: expected an integer, got JSON number %s", field, task.Truncate(string(num), 32)))
	}
	return int(n), nil
}

func unknownField(key []byte) *Error {
	return &Error{http.StatusBadRequest, CodeUnknownField,
		fmt.Sprintf("unknown field %q (field names are exact; unknown fields are rejected)", task.Truncate(string(key), 64))}
}

func duplicateField(key []byte) *Error {
	return InvalidJSON(fmt.Sprintf("duplicate field %q", task.Truncate(string(key), 64)))
}

// notObject is the answer for a body that is valid JSON but no object.
func notObject(r *reader, what string) *Error {
	return InvalidJSON(fmt.Sprintf("the %s must be a JSON object, not %s", what, r.kind()))
}
