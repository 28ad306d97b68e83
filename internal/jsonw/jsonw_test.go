package jsonw

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzAppendStringSameAsMarshal: AppendString writes what json.Marshal
// writes of a string, byte for byte.
func FuzzAppendStringSameAsMarshal(f *testing.F) {
	for _, s := range []string{"", "plain", "a\"b\\c\x00\x01\x1f\b\f\n\r\t<>&\u2028\u2029\x7f\xff\xc3(é😀\ufffd", "\xed\xa0\x80", "\xf4\x90\x80\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("AppendString(%q) = %s, json.Marshal: %s", s, got, want)
		}
	})
}
