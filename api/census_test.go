package api

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// The census types write times with milliseconds in UTC, the figures of
// a type flat beside its name, and read back what they write.
func TestCensusJSON(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	c := Counts{At: Time{at}, Types: []TypeCount{{Type: "mail", CountFigures: CountFigures{Scheduled: 1, Dead: 2}}},
		Totals: CountFigures{Scheduled: 1, Dead: 2}, Scanned: 3}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"at":"2026-01-02T02:04:05.000Z","types":[{"type":"mail","scheduled":1,"retrying":0,"paused":0,"succeeded":0,"dead":2}],` +
		`"totals":{"scheduled":1,"retrying":0,"paused":0,"succeeded":0,"dead":2},"sampled":false,"scanned":3}`
	if string(b) != want {
		t.Fatalf("counts:\n got %s\nwant %s", b, want)
	}
	var back Counts
	if err := json.Unmarshal(b, &back); err != nil || !back.At.Equal(at) || back.Types[0] != c.Types[0] {
		t.Fatalf("counts back: %+v %v", back, err)
	}
	l := Load{From: Time{at}, Step: Duration(5 * time.Minute), Horizon: Duration(time.Hour),
		Buckets: []LoadBucket{{Start: Time{at}, Count: 4}}, Types: []TypeLoad{{Type: "mail", Counts: []int64{4}}}}
	b, _ = json.Marshal(l)
	if !strings.Contains(string(b), `"step":"5m0s","horizon":"1h0m0s"`) || !strings.Contains(string(b), `"buckets":[{"start":"2026-01-02T02:04:05.000Z","count":4}]`) {
		t.Fatalf("load: %s", b)
	}
	var lb Load
	if err := json.Unmarshal(b, &lb); err != nil || lb.Step.D() != 5*time.Minute || !lb.Buckets[0].Start.Equal(at) {
		t.Fatalf("load back: %+v %v", lb, err)
	}
	h := History{Points: []HistoryPoint{{At: Time{at}, Succeeded: 1}}, Gauges: []Gauge{{At: Time{at}, JournalDepth: 2}}}
	b, _ = json.Marshal(h)
	var hb History
	if err := json.Unmarshal(b, &hb); err != nil || hb.Gauges[0].JournalDepth != 2 || !hb.Points[0].At.Equal(at) {
		t.Fatalf("history back: %s %+v %v", b, hb, err)
	}
	// the zero time is "", and back
	b, _ = json.Marshal(Gauge{})
	if !strings.HasPrefix(string(b), `{"at":""`) {
		t.Fatalf("zero: %s", b)
	}
	var g Gauge
	if err := json.Unmarshal(b, &g); err != nil || !g.At.IsZero() {
		t.Fatalf("zero back: %+v %v", g, err)
	}
	for raw, want := range map[string]string{`{"at":5}`: "expected a time string", `{"at":"soon"}`: `"soon" is not an RFC 3339 time`} {
		if err := json.Unmarshal([]byte(raw), &g); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", raw, err, want)
		}
	}
}
