package daemon

import (
	"fmt"
	"net/http"
	"strconv"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// A small JSON reader for the request bodies, written for the write
// path's cost (encoding/json with DisallowUnknownFields spent most of the
// daemon's CPU per task). It accepts exactly what encoding/json accepts
// (RFC 8259; strings may hold invalid UTF-8, which becomes U+FFFD as in
// encoding/json; nesting up to 10000 levels); FuzzDecodeTask checks it
// against encoding/json.
//
// Use: validate the whole body with scanOne, then walk it with a reader,
// which may then assume the syntax is right.

const maxDepth = 10000

// scanOne checks that b is exactly one JSON value with optional white
// space around it.
func scanOne(b []byte) *apiError {
	i := skipWS(b, 0)
	if i == len(b) {
		return errInvalidJSON("empty body: expected a JSON object")
	}
	end, msg := scanValue(b, i, 0)
	if msg != "" {
		return errInvalidJSON(fmt.Sprintf("invalid JSON at byte %d: %s", end, msg))
	}
	if end = skipWS(b, end); end != len(b) {
		return errInvalidJSON(fmt.Sprintf("invalid JSON at byte %d: trailing data after the value", end))
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
}

// kind names the JSON type of the value at r.i, for messages.
func (r *reader) kind() string {
	switch c := r.b[r.i]; {
	case c == '"':
		return "string"
	case c == '{':
		return "object"
	case c == '[':
		return "array"
	case c == 't' || c == 'f':
		return "bool"
	case c == 'n':
		return "null"
	}
	return "number"
}

func typeError(field, want string, r *reader) *apiError {
	return errInvalidTask(fmt.Sprintf("%s: expected %s, got JSON %s", field, want, r.kind()))
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
// member's value; fn must consume the value. A value at r.i that is not
// an object is reported with what.
func (r *reader) object(what string, fn func(key []byte) *apiError) *apiError {
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
		key := r.rawString(buf[:0])
		r.i = skipWS(r.b, r.i)
		r.i = skipWS(r.b, r.i+1) // ':'
		if e := fn(key); e != nil {
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

// str reads the string at r.i (for field), or reports a type error.
func (r *reader) str(field string) (string, *apiError) {
	if r.b[r.i] != '"' {
		e := typeError(field, "a string", r)
		r.skip()
		return "", e
	}
	return string(r.rawString(nil)), nil
}

// rawString reads the string at r.i, unescaped, into buf (or a sub-slice
// of the body when it needs no unescaping).
func (r *reader) rawString(buf []byte) []byte {
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
		return s
	}
	return unquote(buf, s)
}

// unquote unescapes a string body, turning invalid UTF-8 and invalid
// surrogates into U+FFFD exactly as encoding/json does.
func unquote(out, s []byte) []byte {
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
					rr = unicode.ReplacementChar
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
				out = utf8.AppendRune(out, unicode.ReplacementChar)
			} else {
				out = append(out, s[i:i+size]...)
			}
			i += size
		}
	}
	return out
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
func (r *reader) integer(field string) (int, *apiError) {
	if c := r.b[r.i]; c != '-' && (c < '0' || c > '9') {
		e := typeError(field, "an integer", r)
		r.skip()
		return 0, e
	}
	num := r.skip()
	n, err := strconv.ParseInt(string(num), 10, 64)
	if err != nil {
		return 0, errInvalidTask(fmt.Sprintf("%s: expected an integer, got JSON number %s", field, truncateString(string(num), 32)))
	}
	return int(n), nil
}

func unknownField(key []byte) *apiError {
	return &apiError{http.StatusBadRequest, codeUnknownField,
		fmt.Sprintf("unknown field %q (field names are exact; unknown fields are rejected)", truncateString(string(key), 64))}
}

func duplicateField(key []byte) *apiError {
	return errInvalidJSON(fmt.Sprintf("duplicate field %q", truncateString(string(key), 64)))
}

// notObject is the answer for a body that is valid JSON but no object.
func notObject(r *reader, what string) *apiError {
	return errInvalidJSON(fmt.Sprintf("the %s must be a JSON object, not %s", what, r.kind()))
}
