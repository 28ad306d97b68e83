// Package jsonw writes the strings and times of delayq's hand-written
// JSON encoders (the daemon's answers, outcome records): strings exactly as
// encoding/json writes them, times as task.TimeLayout writes them. One
// rule each for every encoder that skips json.Marshal's reflection.
package jsonw

import (
	"time"
	"unicode/utf8"

	"github.com/delayq/delayq/internal/task"
)

// AppendTime appends t in UTC as t.UTC().AppendFormat(b, task.TimeLayout)
// does (RFC 3339, milliseconds truncated, "Z"), unquoted: digit by digit
// for years 0 to 9999 (AppendFormat's walk of the layout was half the cost
// of an outcome record's JSON), through AppendFormat for the others
// (FuzzAppendTimeSameAsFormat holds it to that).
func AppendTime(b []byte, t time.Time) []byte {
	t = t.UTC()
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return t.AppendFormat(b, task.TimeLayout)
	}
	hour, minute, sec := t.Clock()
	ms := t.Nanosecond() / int(time.Millisecond)
	d2 := func(b []byte, v int) []byte { return append(b, byte('0'+v/10), byte('0'+v%10)) }
	b = append(b, byte('0'+year/1000), byte('0'+year/100%10), byte('0'+year/10%10), byte('0'+year%10), '-')
	b = d2(b, int(month))
	b = append(b, '-')
	b = d2(b, day)
	b = append(b, 'T')
	b = d2(b, hour)
	b = append(b, ':')
	b = d2(b, minute)
	b = append(b, ':')
	b = d2(b, sec)
	return append(b, '.', byte('0'+ms/100), byte('0'+ms/10%10), byte('0'+ms%10), 'Z')
}

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
