// Package jsonw writes the JSON strings of delayq's hand-written encoders
// (the daemon's answers, outcome records) exactly as encoding/json writes
// them: one escaping rule for every encoder that skips json.Marshal's
// reflection.
package jsonw

import "unicode/utf8"

// AppendString appends s as encoding/json writes a string: quotes,
// backslash and control characters escaped (\b \f \n \r \t by name, the
// others as \u00XX), <, > and & as \u003c \u003e \u0026 (its HTML
// escaping), U+2028 and U+2029 as \u2028 \u2029, and every invalid UTF-8
// byte as \ufffd (FuzzAppendStringSameAsMarshal holds it to that).
func AppendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
