package schedule

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// strictSpecJSON applies the API's decoding policy (internal/daemon/wire/decode.go)
// where encoding/json, which DecodeSpec uses after it, is lenient: a field name
// must match exactly ("Cron" is unknown, not cron), a field of the spec or
// its task given twice is invalid JSON (a repeated header name keeps the
// last value, as in POST /v1/tasks), and every string (payload and header strings included)
// must be valid UTF-8 without an unpaired \u surrogate escape (422 naming
// the field; encoding/json would silently repair it to U+FFFD). Syntax
// errors are left to DecodeSpec, which names them.
func strictSpecJSON(b []byte) error {
	w := &specWalker{dec: json.NewDecoder(bytes.NewReader(b)), b: b}
	w.dec.UseNumber()
	err := w.value("")
	if errors.Is(err, errWalkSyntax) {
		return nil
	}
	return err
}

// errWalkSyntax stops the walk at a syntax error (DecodeSpec reports it).
var errWalkSyntax = errors.New("syntax")

// specFields are the exact field names of the objects of a spec whose
// fields are fixed, by path ("" the spec, "task" its task); the others
// (payload, headers) take any name.
var specFields = map[string][]string{
	"":     jsonNames(reflect.TypeFor[Spec]()),
	"task": jsonNames(reflect.TypeFor[Template]()),
}

// jsonNames are the JSON names of a struct type's fields.
func jsonNames(t reflect.Type) []string {
	var out []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

type specWalker struct {
	dec *json.Decoder
	b   []byte
}

// token reads the next token and, for a string, checks its raw text.
func (w *specWalker) token(path string) (json.Token, error) {
	from := w.dec.InputOffset()
	tok, err := w.dec.Token()
	if err != nil {
		return nil, errWalkSyntax
	}
	if _, ok := tok.(string); ok {
		raw := bytes.TrimLeft(w.b[from:w.dec.InputOffset()], " \t\r\n,:")
		if !validJSONText(raw) {
			return nil, &FieldError{Field: fieldOf(path), Reason: `not valid UTF-8 (invalid bytes or an unpaired \u surrogate escape)`}
		}
	}
	return tok, nil
}

// value walks one value at path.
func (w *specWalker) value(path string) error {
	tok, err := w.token(path)
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		names, fixed := specFields[path]
		seen := map[string]bool{}
		for w.dec.More() {
			k, err := w.token(path)
			if err != nil {
				return err
			}
			key, _ := k.(string)
			sub := key
			if path != "" {
				sub = path + "." + key
			}
			switch {
			case fixed && seen[key]:
				return fmt.Errorf("%w: field %q given twice", ErrSyntax, sub)
			case fixed && !slices.Contains(names, key):
				return fmt.Errorf("%w %q (known: %s)", ErrUnknownField, sub, strings.Join(names, ", "))
			}
			seen[key] = true
			if err := w.value(sub); err != nil {
				return err
			}
		}
		_, err = w.token(path)
		return err
	case json.Delim('['):
		for w.dec.More() {
			if err := w.value(path); err != nil {
				return err
			}
		}
		_, err = w.token(path)
		return err
	}
	return nil
}

// fieldOf is the spec field a path lies in: "task.payload" for
// "task.payload.a.b", "task.headers" for a header, "cron" for "cron".
func fieldOf(path string) string {
	parts := strings.SplitN(path, ".", 3)
	if len(parts) > 1 && parts[0] == "task" {
		return parts[0] + "." + parts[1]
	}
	if parts[0] == "" {
		return "body"
	}
	return parts[0]
}

// validJSONText reports whether the raw JSON text v is valid UTF-8 with
// every \u surrogate escape paired.
func validJSONText(v []byte) bool {
	if !utf8.Valid(v) {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] != '\\' {
			continue
		}
		if i+1 >= len(v) || v[i+1] != 'u' {
			i++
			continue
		}
		if i+6 > len(v) {
			return false
		}
		r, ok := hexRune(v[i+2 : i+6])
		i += 5
		switch {
		case !ok:
			return false
		case r >= 0xDC00 && r <= 0xDFFF:
			return false // a low surrogate first
		case r >= 0xD800 && r <= 0xDBFF:
			if i+7 > len(v) || v[i+1] != '\\' || v[i+2] != 'u' {
				return false
			}
			if lo, ok := hexRune(v[i+3 : i+7]); !ok || lo < 0xDC00 || lo > 0xDFFF {
				return false
			}
			i += 6
		}
	}
	return true
}

func hexRune(s []byte) (rune, bool) {
	n, err := strconv.ParseUint(string(s), 16, 32)
	return rune(n), err == nil
}
