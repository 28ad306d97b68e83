package jsonw

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/task"
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

// FuzzAppendTimeSameAsFormat: AppendTime writes what AppendFormat writes
// of the UTC time in task.TimeLayout, for any instant and zone.
func FuzzAppendTimeSameAsFormat(f *testing.F) {
	f.Add(int64(1767323047), int64(999_999_999), 0)
	f.Add(int64(0), int64(1), -5*3600)
	f.Add(int64(-62135596800), int64(0), 0)   // year 1
	f.Add(int64(-62167219200-1), int64(0), 0) // the last second of year -1
	f.Add(int64(253402300799), int64(999_000_000), 3600)
	f.Add(int64(253402300800), int64(0), 0) // year 10000
	f.Fuzz(func(t *testing.T, sec, nsec int64, offset int) {
		tm := time.Unix(sec, nsec).In(time.FixedZone("z", offset%(24*3600)))
		want := tm.UTC().AppendFormat(nil, task.TimeLayout)
		if got := AppendTime(nil, tm); !bytes.Equal(got, want) {
			t.Fatalf("AppendTime(%v) = %s, AppendFormat: %s", tm, got, want)
		}
	})
}
