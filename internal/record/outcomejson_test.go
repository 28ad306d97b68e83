package record

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/task"
)

// marshalOutcomeRef is how EncodeOutcome wrote the value before
// AppendOutcomeJSON: json.Marshal of outcomeJSON. Kept as the reference
// the appender must match byte for byte.
func marshalOutcomeRef(o *OutcomeRecord) []byte {
	tm := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(OutcomeTimeLayout)
	}
	v := outcomeJSON{
		ID: o.ID, Type: o.Type, Outcome: o.Outcome, Attempt: o.Attempt, MaxAttempts: o.MaxAttempts,
		Error: task.Clip(o.Error, OutcomeErrorMax), DueAt: tm(o.DueAt), FinishedAt: tm(o.FinishedAt),
		DurationMS: o.Duration.Milliseconds(), Shard: o.Shard, Headers: o.Headers,
	}
	if len(v.Headers) == 0 {
		v.Headers = nil
	}
	if !o.FiredAt.IsZero() {
		v.FiredAt, v.Partition, v.Offset = tm(o.FiredAt), &o.Partition, &o.Offset
	}
	b, err := json.Marshal(&v)
	if err != nil {
		panic(err)
	}
	return b
}

// The appender writes what json.Marshal wrote, for every field's edge:
// escapes, invalid UTF-8, zero and far times, empty and many headers, the
// receipt with partition 0.
func TestOutcomeJSONSameAsMarshal(t *testing.T) {
	base := sampleOutcome()
	nasty := "a\"b\\c\x00\x01\x1f\b\f\n\r\t<>&\u2028\u2029\x7f\xff\xc3(é😀\ufffd end"
	cases := map[string]func(o *OutcomeRecord){
		"sample":        func(*OutcomeRecord) {},
		"escapes":       func(o *OutcomeRecord) { o.ID, o.Type, o.Error = nasty, nasty, nasty },
		"header escape": func(o *OutcomeRecord) { o.Headers = map[string]string{nasty: nasty, "b": "", "a": "<x>", "\xff": "1"} },
		"no headers":    func(o *OutcomeRecord) { o.Headers = map[string]string{} },
		"nil headers":   func(o *OutcomeRecord) { o.Headers = nil },
		"zero times":    func(o *OutcomeRecord) { o.DueAt, o.FinishedAt = time.Time{}, time.Time{} },
		"far times": func(o *OutcomeRecord) {
			o.DueAt, o.FinishedAt = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC), time.Unix(0, 1).In(time.FixedZone("x", 3600))
		},
		"many headers": func(o *OutcomeRecord) {
			o.Headers = map[string]string{}
			for i := range 20 {
				o.Headers[string(rune('t'-i))+"h"] = strings.Repeat("v", i)
			}
		},
		"years": func(o *OutcomeRecord) {
			o.DueAt, o.FinishedAt = time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
			o.FiredAt = time.Date(0, 2, 29, 23, 59, 59, 999_999_999, time.FixedZone("w", -5*3600))
		},
		"receipt p0":    func(o *OutcomeRecord) { o.FiredAt, o.Partition, o.Offset = time.UnixMilli(5), 0, 0 },
		"receipt":       func(o *OutcomeRecord) { o.FiredAt, o.Partition, o.Offset = time.UnixMilli(1767323047000), 7, 1<<40 },
		"negatives":     func(o *OutcomeRecord) { o.Attempt, o.MaxAttempts, o.Shard, o.Duration = -1, -5, -1, -time.Hour },
		"long error":    func(o *OutcomeRecord) { o.Error = string(bytes.Repeat([]byte("é<"), OutcomeErrorMax)) },
		"empty strings": func(o *OutcomeRecord) { o.ID, o.Type, o.Outcome, o.Error = "", "", "", "" },
		"sub-ms":        func(o *OutcomeRecord) { o.Duration = 999 * time.Microsecond },
		"headers sorted": func(o *OutcomeRecord) {
			o.Headers = map[string]string{"z": "1", "A": "2", "a": "3", "é": "4", "": "5"}
		},
	}
	for name, mod := range cases {
		o := sampleOutcome()
		*o = *base
		mod(o)
		want, got := marshalOutcomeRef(o), AppendOutcomeJSON(nil, o)
		if !bytes.Equal(got, want) {
			t.Errorf("%s:\n got %s\nwant %s", name, got, want)
		}
	}
}

// FuzzOutcomeJSONSameAsMarshal compares the appender with json.Marshal on
// arbitrary strings, numbers and times.
func FuzzOutcomeJSONSameAsMarshal(f *testing.F) {
	f.Add("order-1", "t", "succeeded", "boom", "k", "v", int64(1767323047001), int64(5), 1, 3, 2, int64(120), int32(0), int64(0))
	f.Add("a\"<\xff\u2028", "\x00\x1f", "", "\xc3(", "\u2029", "&", int64(-1), int64(0), -1, 0, -1, int64(-7), int32(3), int64(-9))
	f.Fuzz(func(t *testing.T, id, typ, outcome, errStr, hk, hv string, due, fired int64, attempt, maxAttempts, shard int, durMS int64, part int32, off int64) {
		o := &OutcomeRecord{
			ID: id, Type: typ, Outcome: outcome, Attempt: attempt, MaxAttempts: maxAttempts, Error: errStr,
			DueAt: time.UnixMilli(due), FinishedAt: time.Unix(0, fired*7919), Duration: time.Duration(durMS) * time.Microsecond,
			Shard: shard, Headers: map[string]string{hk: hv, hv: hk}, Partition: part, Offset: off,
		}
		if fired != 0 {
			o.FiredAt = time.UnixMilli(fired)
		}
		if due == 0 {
			o.DueAt = time.Time{}
		}
		if want, got := marshalOutcomeRef(o), AppendOutcomeJSON(nil, o); !bytes.Equal(got, want) {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
	})
}

// BenchmarkEncodeOutcome: the value of a typical outcome record, by the
// appender and by json.Marshal (the reference it replaced).
//
//	go test ./internal/record -run '^$' -bench BenchmarkEncodeOutcome -benchmem
func BenchmarkEncodeOutcome(b *testing.B) {
	o := sampleOutcome()
	o.FiredAt, o.Partition, o.Offset = o.FinishedAt, 3, 123456
	b.Run("append", func(b *testing.B) {
		for b.Loop() {
			_ = AppendOutcomeJSON(nil, o)
		}
	})
	b.Run("marshal", func(b *testing.B) {
		for b.Loop() {
			_ = marshalOutcomeRef(o)
		}
	})
}
