package redisstore

import (
	"strconv"
	"testing"
)

// ParseWake reads what wake in common.lua publishes ("<shard>:<due ms>")
// and nothing else.
func TestParseWake(t *testing.T) {
	for _, c := range []struct {
		in    string
		shard int
		due   int64
		ok    bool
	}{
		{"3:1700000000123", 3, 1700000000123, true},
		{"0:0", 0, 0, true},
		{"4095:-5", 4095, -5, true},
		{"", 0, 0, false},
		{"3", 0, 0, false},
		{"-1:5", 0, 0, false},
		{"x:5", 0, 0, false},
		{"3:5.5", 0, 0, false},
		{"3:5:6", 0, 0, false},
	} {
		shard, due, ok := ParseWake(c.in)
		if shard != c.shard || due != c.due || ok != c.ok {
			t.Errorf("ParseWake(%q) = %d, %d, %v; want %d, %d, %v", c.in, shard, due, ok, c.shard, c.due, c.ok)
		}
	}
}

// FuzzParseWake: a payload ParseWake accepts is the shard and due time it
// names, written back the same way (wake in common.lua formats '%d').
func FuzzParseWake(f *testing.F) {
	for _, s := range []string{"3:1700000000123", "0:0", "-1:5", "a:b", ":"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		shard, due, ok := ParseWake(s)
		if !ok {
			return
		}
		if shard < 0 {
			t.Fatalf("ParseWake(%q): negative shard %d", s, shard)
		}
		back := strconv.Itoa(shard) + ":" + strconv.FormatInt(due, 10)
		if again, due2, ok2 := ParseWake(back); !ok2 || again != shard || due2 != due {
			t.Fatalf("ParseWake(%q) = %d:%d does not read back", s, shard, due)
		}
	})
}
