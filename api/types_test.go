package api

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestDurationJSON(t *testing.T) {
	b, err := json.Marshal(Duration(90 * time.Second))
	if err != nil || string(b) != `"1m30s"` {
		t.Fatalf("marshal: %s %v", b, err)
	}
	var d Duration
	if err := json.Unmarshal([]byte(`"250ms"`), &d); err != nil || d.D() != 250*time.Millisecond {
		t.Fatalf("unmarshal: %v %v", d, err)
	}
	for raw, want := range map[string]string{
		`5`:                                 `expected a duration string such as "10s", got 5`,
		`"soon"`:                            `"soon" is not a duration such as "10s"`,
		`"` + strings.Repeat("é", 40) + `"`: `is not a duration`,
	} {
		if err := json.Unmarshal([]byte(raw), &d); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("unmarshal %s: %v, want %q", raw, err, want)
		}
	}
}

func TestShardMapProgress(t *testing.T) {
	for _, c := range []struct {
		m    ShardMap
		want float64
	}{
		{ShardMap{State: ShardsStable}, 1},
		{ShardMap{State: ShardsMigrating}, 0},
		{ShardMap{State: ShardsMigrating, Moved: 1, Remaining: 3}, 0.25},
	} {
		if got := c.m.Progress(); got != c.want {
			t.Errorf("%+v: progress %v, want %v", c.m, got, c.want)
		}
	}
}

// The cluster view's times are written with milliseconds in UTC, left
// out (or empty) when zero, and read back.
func TestClusterTimes(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6_000_000, time.FixedZone("x", 3600))
	p := Process{ID: "p", Kind: "work", StartedAt: at, Counters: map[string]float64{"done": 2}, AsOf: at}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"p","kind":"work","version":"","addr":"","ready":false,"started_at":"2026-01-02T02:04:05.006Z","counters":{"done":2},"as_of":"2026-01-02T02:04:05.006Z"}`
	if string(b) != want {
		t.Fatalf("process:\n got %s\nwant %s", b, want)
	}
	var back Process
	if err := json.Unmarshal(b, &back); err != nil || !back.StartedAt.Equal(at) || back.Counters["done"] != 2 {
		t.Fatalf("process back: %+v %v", back, err)
	}
	b, _ = json.Marshal(Process{ID: "q"})
	if strings.Contains(string(b), "started_at") || strings.Contains(string(b), "as_of") {
		t.Fatalf("zero times written: %s", b)
	}
	b, _ = json.Marshal(WorkedTopic{Topic: "orders"})
	if string(b) != `{"topic":"orders","group":"","since":"","by":""}` {
		t.Fatalf("worked topic: %s", b)
	}
	var w WorkedTopic
	if err := json.Unmarshal([]byte(`{"topic":"o","since":"2026-01-02T02:04:05.006Z"}`), &w); err != nil || !w.Since.Equal(at) {
		t.Fatalf("worked topic back: %+v %v", w, err)
	}
}
