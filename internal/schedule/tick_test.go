package schedule

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func mustCompile(t *testing.T, s Spec) *Compiled {
	t.Helper()
	if s.Task.Type == "" {
		s.Task.Type = "report"
	}
	c, err := Compile(s)
	if err != nil {
		t.Fatalf("Compile(%+v): %v", s, err)
	}
	return c
}

func ts(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// wall formats ticks in the schedule's zone with their offsets, so that a
// failure shows which occurrence of a repeated hour was chosen.
func wall(c *Compiled, ticks []time.Time) string {
	var b strings.Builder
	for i, x := range ticks {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(x.In(c.Location()).Format("2006-01-02T15:04:05Z07:00"))
	}
	return b.String()
}

// TestTicksAcrossDST checks the documented DST rules in two zones whose
// changes fall on different dates and at different local hours, with a
// fake clock (the "after" argument): a wall-clock time that does not exist
// is skipped; one that occurs twice fires once, unless the hour field is
// "*", which follows elapsed time.
func TestTicksAcrossDST(t *testing.T) {
	cases := []struct {
		name, cron, tz, from string
		want                 string
	}{
		// Europe/Berlin: 2026-03-29 02:00 CET -> 03:00 CEST; 2026-10-25 03:00 CEST -> 02:00 CET
		{"berlin spring: 02:30 does not exist on the 29th", "30 2 * * *", "Europe/Berlin", "2026-03-27T00:00:00Z",
			"2026-03-27T02:30:00+01:00 2026-03-28T02:30:00+01:00 2026-03-30T02:30:00+02:00"},
		{"berlin autumn: 02:30 occurs twice, fires once", "30 2 * * *", "Europe/Berlin", "2026-10-24T00:00:00Z",
			"2026-10-24T02:30:00+02:00 2026-10-25T02:30:00+02:00 2026-10-26T02:30:00+01:00"},
		{"berlin autumn: hours 1-3 every 30 min, the repeated 2:xx once", "0 */30 1-3 * * *", "Europe/Berlin", "2026-10-24T22:00:00Z",
			"2026-10-25T01:00:00+02:00 2026-10-25T01:30:00+02:00 2026-10-25T02:00:00+02:00 2026-10-25T02:30:00+02:00 2026-10-25T03:00:00+01:00 2026-10-25T03:30:00+01:00"},
		{"berlin autumn: every 30 min of every hour follows elapsed time", "0 */30 * * * *", "Europe/Berlin", "2026-10-24T23:00:00Z",
			"2026-10-25T01:30:00+02:00 2026-10-25T02:00:00+02:00 2026-10-25T02:30:00+02:00 2026-10-25T02:00:00+01:00 2026-10-25T02:30:00+01:00 2026-10-25T03:00:00+01:00"},
		{"berlin spring: hourly skips the missing hour", "@hourly", "Europe/Berlin", "2026-03-28T23:30:00Z",
			"2026-03-29T01:00:00+01:00 2026-03-29T03:00:00+02:00 2026-03-29T04:00:00+02:00"},
		// America/New_York: 2026-03-08 02:00 EST -> 03:00 EDT; 2026-11-01 02:00 EDT -> 01:00 EST
		{"new york spring: 02:30 does not exist on the 8th", "0 30 2 * * *", "America/New_York", "2026-03-07T00:00:00Z",
			"2026-03-07T02:30:00-05:00 2026-03-09T02:30:00-04:00 2026-03-10T02:30:00-04:00"},
		{"new york autumn: 01:30 occurs twice, fires once", "30 1 * * *", "America/New_York", "2026-10-31T00:00:00Z",
			"2026-10-31T01:30:00-04:00 2026-11-01T01:30:00-04:00 2026-11-02T01:30:00-05:00"},
		{"new york autumn: every 20 s within hour 1, the repeated 01:59 once", "*/20 59 1 * * *", "America/New_York", "2026-11-01T05:58:00Z",
			"2026-11-01T01:59:00-04:00 2026-11-01T01:59:20-04:00 2026-11-01T01:59:40-04:00 2026-11-02T01:59:00-05:00"},
		{"new york: daily at midnight is unaffected", "@daily", "America/New_York", "2026-03-07T12:00:00Z",
			"2026-03-08T00:00:00-05:00 2026-03-09T00:00:00-04:00 2026-03-10T00:00:00-04:00"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := mustCompile(t, Spec{Cron: tc.cron, Timezone: tc.tz})
			want := strings.Fields(tc.want)
			got := wall(c, c.NextN(ts(t, tc.from), len(want)))
			if got != tc.want {
				t.Fatalf("ticks after %s:\n got  %s\n want %s", tc.from, got, tc.want)
			}
		})
	}
}

func TestTicksMonthEndsAndLeapDays(t *testing.T) {
	cases := []struct{ name, cron, tz, from, want string }{
		{"the 31st skips shorter months", "0 0 0 31 * *", "UTC", "2026-01-01T00:00:00Z",
			"2026-01-31T00:00:00Z 2026-03-31T00:00:00Z 2026-05-31T00:00:00Z 2026-07-31T00:00:00Z 2026-08-31T00:00:00Z"},
		{"the 30th skips February", "0 0 12 30 * *", "Europe/Berlin", "2027-01-15T00:00:00Z",
			"2027-01-30T12:00:00+01:00 2027-03-30T12:00:00+02:00"},
		{"February 29 only in leap years", "0 0 29 2 *", "UTC", "2026-01-01T00:00:00Z",
			"2028-02-29T00:00:00Z 2032-02-29T00:00:00Z"},
		{"the 1st after a leap day", "@monthly", "Asia/Tokyo", "2028-02-28T12:00:00Z",
			"2028-03-01T00:00:00+09:00 2028-04-01T00:00:00+09:00"},
		{"yearly on a leap year's New Year", "@yearly", "UTC", "2027-12-31T23:59:59Z",
			"2028-01-01T00:00:00Z 2029-01-01T00:00:00Z"},
		{"last second of a month in the zone", "59 59 23 28-31 2 *", "UTC", "2028-02-28T00:00:00Z",
			"2028-02-28T23:59:59Z 2028-02-29T23:59:59Z 2029-02-28T23:59:59Z"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := mustCompile(t, Spec{Cron: tc.cron, Timezone: tc.tz})
			want := strings.Fields(tc.want)
			if got := wall(c, c.NextN(ts(t, tc.from), len(want))); got != tc.want {
				t.Fatalf("ticks after %s:\n got  %s\n want %s", tc.from, got, tc.want)
			}
		})
	}
}

func TestEveryIsAnchored(t *testing.T) {
	c := mustCompile(t, Spec{Cron: "@every 10s"})
	if got := wall(c, c.NextN(ts(t, "2026-01-01T00:00:05Z"), 2)); got != "2026-01-01T00:00:10Z 2026-01-01T00:00:20Z" {
		t.Fatalf("epoch-anchored: %s", got)
	}
	// across DST, real elapsed time
	c = mustCompile(t, Spec{Cron: "@every 1h", Timezone: "Europe/Berlin"})
	if got := wall(c, c.NextN(ts(t, "2026-10-24T23:30:00Z"), 3)); got != "2026-10-25T02:00:00+02:00 2026-10-25T02:00:00+01:00 2026-10-25T03:00:00+01:00" {
		t.Fatalf("every hour across autumn DST: %s", got)
	}
	start := ts(t, "2026-01-01T00:00:03Z")
	c = mustCompile(t, Spec{Cron: "@every 1m30s", StartAt: &start})
	if got := wall(c, c.NextN(ts(t, "2025-01-01T00:00:00Z"), 3)); got != "2026-01-01T00:00:03Z 2026-01-01T00:01:33Z 2026-01-01T00:03:03Z" {
		t.Fatalf("anchored at start_at, the start itself a tick: %s", got)
	}
	if tk, ok := c.Last(ts(t, "2026-01-01T00:00:04Z"), ts(t, "2026-01-01T00:03:00Z")); !ok || !tk.Equal(ts(t, "2026-01-01T00:01:33Z")) {
		t.Fatalf("Last = %v %v", tk, ok)
	}
}

func TestBoundsBetweenAndLast(t *testing.T) {
	start, end := ts(t, "2026-05-01T00:00:00Z"), ts(t, "2026-05-01T00:00:05Z")
	c := mustCompile(t, Spec{Cron: "* * * * * *", StartAt: &start, EndAt: &end})
	ticks, more := c.Between(ts(t, "2026-04-01T00:00:00Z"), ts(t, "2026-06-01T00:00:00Z"), 100)
	if more || wall(c, ticks) != "2026-05-01T00:00:00Z 2026-05-01T00:00:01Z 2026-05-01T00:00:02Z 2026-05-01T00:00:03Z 2026-05-01T00:00:04Z 2026-05-01T00:00:05Z" {
		t.Fatalf("Between within bounds: %s more=%v", wall(c, ticks), more)
	}
	ticks, more = c.Between(ts(t, "2026-04-01T00:00:00Z"), ts(t, "2026-06-01T00:00:00Z"), 2)
	if !more || len(ticks) != 2 {
		t.Fatalf("Between capped: %d more=%v", len(ticks), more)
	}
	if _, ok := c.Next(end); ok {
		t.Fatal("a tick after end_at")
	}
	if tk, ok := c.Last(ts(t, "2026-04-01T00:00:00Z"), ts(t, "2026-06-01T00:00:00Z")); !ok || !tk.Equal(end) {
		t.Fatalf("Last = %v %v, want %v", tk, ok, end)
	}
	// Last over a long range of a dense schedule stays cheap and exact
	c = mustCompile(t, Spec{Cron: "*/7 * 9 * * *", Timezone: "Europe/Berlin"})
	tk, ok := c.Last(ts(t, "2025-01-01T00:00:00Z"), ts(t, "2026-07-01T06:00:00Z"))
	if !ok || wall(c, []time.Time{tk}) != "2026-06-30T09:59:56+02:00" {
		t.Fatalf("Last of a dense schedule = %s %v", wall(c, []time.Time{tk}), ok)
	}
	if _, ok := c.Last(tk, tk); ok {
		t.Fatal("Last of an empty range")
	}
}

func TestCompileNamesTheField(t *testing.T) {
	start, end := ts(t, "2026-05-01T00:00:00Z"), ts(t, "2026-04-01T00:00:00Z")
	cases := []struct {
		spec  Spec
		field string
	}{
		{Spec{Task: Template{Type: "x"}}, "cron"},
		{Spec{Cron: "61 * * * *", Task: Template{Type: "x"}}, "cron"},
		{Spec{Cron: "* * * *", Task: Template{Type: "x"}}, "cron"},
		{Spec{Cron: "@every 500ms", Task: Template{Type: "x"}}, "cron"},
		{Spec{Cron: "@every soon", Task: Template{Type: "x"}}, "cron"},
		{Spec{Cron: "CRON_TZ=UTC * * * * *", Task: Template{Type: "x"}}, "cron"},
		{Spec{Cron: "0 0 30 2 *", Task: Template{Type: "x"}}, "cron"},
		{Spec{Cron: "@daily", Timezone: "Mars/Olympus", Task: Template{Type: "x"}}, "timezone"},
		{Spec{Cron: "@daily", Timezone: "Local", Task: Template{Type: "x"}}, "timezone"},
		{Spec{Cron: "@daily", Catchup: "some", Task: Template{Type: "x"}}, "catchup"},
		{Spec{Cron: "@daily", StartAt: &start, EndAt: &end, Task: Template{Type: "x"}}, "end_at"},
		{Spec{Cron: "@daily"}, "task.type"},
		{Spec{Cron: "@daily", Task: Template{Type: "x", Topic: "no spaces"}}, "task.topic"},
		{Spec{Cron: "@daily", Task: Template{Type: "x", Timeout: "soon"}}, "task.timeout"},
		{Spec{Cron: "@daily", Task: Template{Type: "x", MaxAttempts: -1}}, "task.max_attempts"},
		{Spec{Cron: "@daily", Task: Template{Type: "x", Payload: []byte(`{"a":1}`), PayloadBase64: "AA=="}}, "task.payload"},
		{Spec{Cron: "@daily", Task: Template{Type: "x", PayloadBase64: "!!"}}, "task.payload_base64"},
		{Spec{Cron: "@daily", Task: Template{Type: "x", Headers: map[string]string{"dq-x": "1"}}}, "task.headers"},
	}
	for _, tc := range cases {
		_, err := Compile(tc.spec)
		var fe *FieldError
		if !errors.As(err, &fe) || !errors.Is(err, ErrInvalid) || fe.Field != tc.field {
			t.Errorf("Compile(%+v) = %v, want a FieldError naming %s", tc.spec, err, tc.field)
		}
	}
}

func TestDecodeSpec(t *testing.T) {
	s, err := DecodeSpec([]byte(`{"cron":"*/5 * * * * *","timezone":"Europe/Berlin","task":{"type":"report","payload":{"a": [1, 2]},"timeout":"30s","headers":{"h":"v"}},"catchup":"all","start_at":"2026-01-01T00:00:00+01:00"}`), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if s.EffectiveCatchup() != CatchupAll || s.StartAt == nil || !s.StartAt.Equal(ts(t, "2025-12-31T23:00:00Z")) || s.Task.Timeout != "30s" {
		t.Fatalf("decoded %+v", s)
	}
	c := mustCompile(t, s)
	tk := c.Task("nightly", ts(t, "2026-02-01T00:00:05Z"))
	if tk.ID != "nightly@1769904005000" || !tk.PayloadJSON || string(tk.Payload) != `{"a":[1,2]}` || tk.Timeout != 30*time.Second || tk.Headers["h"] != "v" {
		t.Fatalf("task %+v", tk)
	}
	if err := tk.Validate(); err != nil {
		t.Fatalf("a tick's task does not validate: %v", err)
	}
	if id, tick, ok := ParseTaskID(tk.ID); !ok || id != "nightly" || !tick.Equal(tk.DueAt) {
		t.Fatalf("ParseTaskID(%s) = %s %v %v", tk.ID, id, tick, ok)
	}
	if _, _, ok := ParseTaskID("order-1"); ok {
		t.Fatal("ParseTaskID accepted an id without a tick")
	}
	bad := []struct {
		body string
		want error
		msg  string
	}{
		{`{"cron":"@daily","task":{"type":"x"},"cronn":"x"}`, ErrUnknownField, `"cronn"`},
		{`{"cron":"@daily","task":{"type":"x","typ":"y"}}`, ErrUnknownField, `"task.typ"`},
		{`{"cron":"@daily",`, ErrSyntax, ""},
		{`[1]`, ErrSyntax, ""},
		{`{"cron":"@daily","task":{"type":"x"}} {}`, ErrSyntax, "after"},
		{`{"cron":5,"task":{"type":"x"}}`, ErrInvalid, "cron"},
		{`{"cron":"@daily","paused":"yes","task":{"type":"x"}}`, ErrInvalid, "paused"},
		{`{"cron":"@daily","start_at":"tomorrow","task":{"type":"x"}}`, ErrInvalid, "start_at"},
		{`{"cron":"@daily","end_at":"2026-13-01T00:00:00Z","task":{"type":"x"}}`, ErrInvalid, "end_at"},
		{`{"Cron":"@daily","task":{"type":"x"}}`, ErrUnknownField, `"Cron"`},
		{`{"cron":"@daily","cron":"@hourly","task":{"type":"x"}}`, ErrSyntax, "twice"},
		{`{"cron":"@daily","task":{"type":"x\ud800"}}`, ErrInvalid, "task.type"},
		{`{"cron":"@daily","task":{"type":"x","payload":{"a":"\u00ff` + "\xff" + `"}}}`, ErrInvalid, "task.payload"},
	}
	for _, b := range bad {
		_, err := DecodeSpec([]byte(b.body), time.Now())
		if !errors.Is(err, b.want) || !strings.Contains(err.Error(), b.msg) {
			t.Errorf("DecodeSpec(%s) = %v, want %v mentioning %q", b.body, err, b.want, b.msg)
		}
	}
}

func TestValidateID(t *testing.T) {
	for _, ok := range []string{"nightly", "a", "report:eu-1", "x.y_z", strings.Repeat("a", MaxIDLen)} {
		if err := ValidateID(ok); err != nil {
			t.Errorf("ValidateID(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "a/b", "a@b", "a b", "é", strings.Repeat("a", MaxIDLen+1)} {
		if err := ValidateID(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateID(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

func FuzzDecodeSpec(f *testing.F) {
	f.Add([]byte(`{"cron":"*/5 * * * * *","timezone":"Europe/Berlin","task":{"type":"report","payload":{"a":1}},"catchup":"all"}`))
	f.Add([]byte(`{"cron":"@every 10s","task":{"type":"x","payload_base64":"AA=="},"start_at":"2026-01-01T00:00:00Z","end_at":"2027-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"cron":"0 0 29 2 *","task":{"type":"x"}}`))
	f.Add([]byte(`{"cron":"@every 1h","task":{"type":"t"},"start_at":"2026-01-01T00:00:00+24:00"}`))
	f.Add([]byte(`{"cron":"@every 1h","task":{"type":"t"},"end_at":"2036-01-01T00:00:00-23:59"}`))
	f.Add([]byte(`{"cron":"@hourly","timezone":"Asia/Kathmandu","task":{"type":"t","payload":" null ","headers":{"a":"é"},"timeout":"1h","max_attempts":3,"priority":-7,"key":"k","topic":"t"},"catchup":"none","paused":true}`))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSpec(b, now)
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrUnknownField) {
				t.Fatalf("DecodeSpec error of no known kind: %v", err)
			}
			return
		}
		// whatever validates encodes (as the store writes it) and reads
		// back as the same spec: an encoding error after validation
		// would be a 5xx caused by input alone
		enc, err := json.Marshal(stored{Spec: s, CreatedAt: now, UpdatedAt: now})
		if err != nil {
			t.Fatalf("a valid spec does not encode: %v", err)
		}
		var back stored
		if err := json.Unmarshal(enc, &back); err != nil {
			t.Fatalf("an encoded spec does not decode: %v", err)
		}
		if !sameSpec(back.Spec, s) {
			t.Fatalf("the spec changed through its encoding: %+v, was %+v", back.Spec, s)
		}
		if err := back.Spec.Validate(now); err != nil {
			t.Fatalf("the stored spec does not validate: %v", err)
		}
		c, err := Compile(s)
		if err != nil {
			t.Fatalf("decoded spec does not compile: %v", err)
		}
		after := time.Unix(1_700_000_000, 0)
		prev := after
		for _, tk := range c.NextN(after, 3) {
			if !tk.After(prev) {
				t.Fatalf("ticks not increasing: %v after %v", tk, prev)
			}
			prev = tk
			if err := c.Task("fuzz", tk).Validate(); err != nil {
				t.Fatalf("tick task invalid: %v", err)
			}
		}
	})
}

// TestTemplateTypeRule: a new spec's task template may not have a type
// that a new task may not have (task.ValidateType: "/", ".", ".."), named
// "task.type"; a stored spec with such a type still
// compiles, so its schedule keeps ticking.
func TestTemplateTypeRule(t *testing.T) {
	if err := (&Spec{Cron: "@daily", Task: Template{Type: "email/send"}}).Validate(time.Now()); err != nil {
		t.Errorf(`Validate with task.type "email/send": %v, want it accepted`, err)
	}
	for _, typ := range []string{"/", ".", ".."} {
		s := Spec{Cron: "@daily", Task: Template{Type: typ}}
		var fe *FieldError
		if err := s.Validate(time.Now()); !errors.As(err, &fe) || !errors.Is(err, ErrInvalid) || fe.Field != "task.type" {
			t.Errorf("Validate with task.type %q = %v, want a FieldError naming task.type", typ, err)
		}
		_, err := DecodeSpec([]byte(`{"cron":"@daily","task":{"type":"`+typ+`"}}`), time.Now())
		if !errors.As(err, &fe) || fe.Field != "task.type" || !strings.Contains(err.Error(), "must not") {
			t.Errorf("DecodeSpec with task.type %q = %v, want a FieldError naming task.type", typ, err)
		}
		c := mustCompile(t, s)
		if tk := c.Task("s", ts(t, "2026-02-01T00:00:00Z")); tk.Type != typ || tk.ValidateStored() != nil {
			t.Errorf("the tick of a stored spec of type %q: %+v", typ, tk)
		}
	}
}
