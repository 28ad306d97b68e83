package schedule

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/testenv"
)

// The bounds of issue 40: a time that encoding/json cannot write back is
// bad input naming its field, not an etcd error; an end in the past is
// bad input; the store caps the schedules of a namespace exactly, even
// under concurrent creates; a listing walks the schedules in pages.

var now2026 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestTimesWithBadOffsets(t *testing.T) {
	for _, field := range []string{"start_at", "end_at"} {
		for _, at := range []string{
			"2027-01-01T00:00:00+24:00", // time.Parse takes it; MarshalJSON refuses it
			"2027-01-01T00:00:00-24:00",
			"2027-01-01T00:00:00+01:60", // time.Parse reads it as +02:00
			"2027-01-01T00:00:00+99:00",
		} {
			body := fmt.Sprintf(`{"cron":"@every 1h","task":{"type":"t"},%q:%q}`, field, at)
			_, err := DecodeSpec([]byte(body), now2026)
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != field {
				t.Errorf("DecodeSpec(%s) = %v, want a FieldError naming %s", body, err, field)
			}
		}
	}
	// Built in Go (the store's Put takes a Spec): an offset JSON cannot
	// write, or one with seconds (it would be written without them, and
	// read back as another instant), is refused naming the field.
	for _, off := range []int{24 * 3600, -24 * 3600, 3600 + 30, 25 * 3600} {
		at := time.Date(2027, 1, 1, 0, 0, 0, 0, time.FixedZone("odd", off))
		for field, spec := range map[string]Spec{
			"start_at": {Cron: "@hourly", Task: Template{Type: "t"}, StartAt: &at},
			"end_at":   {Cron: "@hourly", Task: Template{Type: "t"}, EndAt: &at},
		} {
			var fe *FieldError
			if err := spec.Validate(now2026); !errors.As(err, &fe) || fe.Field != field {
				t.Errorf("Validate with %s at offset %ds = %v, want a FieldError naming %s", field, off, err, field)
			}
		}
	}
	// the widest offsets that exist are fine, and encode
	for _, at := range []string{"2027-01-01T00:00:00+23:59", "2027-01-01T00:00:00-23:59", "2027-01-01T00:00:00+05:45"} {
		s, err := DecodeSpec([]byte(`{"cron":"@hourly","task":{"type":"t"},"start_at":"`+at+`","end_at":"2030-01-01T00:00:00Z"}`), now2026)
		if err != nil {
			t.Fatalf("start_at %s: %v", at, err)
		}
		if _, err := json.Marshal(stored{Spec: s}); err != nil {
			t.Fatalf("start_at %s validates but does not encode: %v", at, err)
		}
	}
}

func TestEndAtInThePast(t *testing.T) {
	cases := []struct {
		body  string
		field string // "" = accepted
	}{
		{`{"cron":"@hourly","task":{"type":"t"},"end_at":"1971-01-01T00:00:00Z"}`, "end_at"},
		{`{"cron":"@hourly","task":{"type":"t"},"end_at":"2026-03-01T11:59:59.999Z"}`, "end_at"},
		{`{"cron":"@hourly","task":{"type":"t"},"start_at":"1970-01-01T00:00:00Z","end_at":"1971-01-01T00:00:00Z"}`, "end_at"},
		{`{"cron":"@hourly","task":{"type":"t"},"start_at":"2027-01-01T00:00:00Z","end_at":"2027-01-01T00:00:00Z"}`, "end_at"},
		{`{"cron":"@hourly","task":{"type":"t"},"end_at":"2026-03-01T12:00:00Z"}`, ""},
		{`{"cron":"@hourly","task":{"type":"t"},"start_at":"1971-01-01T00:00:00Z"}`, ""}, // a start in the past is fine
	}
	for _, c := range cases {
		_, err := DecodeSpec([]byte(c.body), now2026)
		var fe *FieldError
		switch {
		case c.field == "" && err != nil:
			t.Errorf("DecodeSpec(%s) = %v, want it accepted", c.body, err)
		case c.field != "" && (!errors.As(err, &fe) || fe.Field != c.field):
			t.Errorf("DecodeSpec(%s) = %v, want a FieldError naming %s", c.body, err, c.field)
		}
	}
	// A stored spec whose end passed still compiles (the scheduler and
	// the API's views read it), it just has no more ticks.
	end := time.Date(1971, 1, 1, 0, 0, 0, 0, time.UTC)
	c := mustCompile(t, Spec{Cron: "@hourly", Task: Template{Type: "t"}, EndAt: &end})
	if _, ok := c.Next(now2026); ok {
		t.Fatal("a tick after end_at")
	}
}

// TestStoreLimit: a new schedule beyond the limit is ErrTooMany and
// writes nothing; replacing, pausing and deleting stay possible; and
// concurrent creates never overshoot the limit.
func TestStoreLimit(t *testing.T) {
	cli := testenv.StartEtcd(t).Client(t)
	ctx := t.Context()
	st := NewStore(cli, testNS(t)).WithLimit(3).WithClock(func() time.Time { return now2026 })
	spec := Spec{Cron: "@hourly", Task: Template{Type: "t"}}
	for _, id := range []string{"a", "b", "c"} {
		if _, created, err := st.Put(ctx, id, spec); err != nil || !created {
			t.Fatalf("Put %s = %v %v", id, created, err)
		}
	}
	if _, _, err := st.Put(ctx, "d", spec); !errors.Is(err, ErrTooMany) || !strings.Contains(err.Error(), "3") {
		t.Fatalf("Put beyond the limit = %v, want ErrTooMany", err)
	}
	if _, err := st.Get(ctx, "d"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the refused schedule exists: %v", err)
	}
	// at the limit, existing schedules may still change
	spec2 := spec
	spec2.Cron = "@daily"
	if _, created, err := st.Put(ctx, "a", spec2); err != nil || created {
		t.Fatalf("replace at the limit = %v %v", created, err)
	}
	if _, _, err := st.SetPaused(ctx, "b", true); err != nil {
		t.Fatalf("pause at the limit = %v", err)
	}
	if ok, err := st.Delete(ctx, "c"); err != nil || !ok {
		t.Fatalf("delete = %v %v", ok, err)
	}
	if _, created, err := st.Put(ctx, "d", spec); err != nil || !created {
		t.Fatalf("Put after a delete = %v %v", created, err)
	}

	// Concurrent creates in a fresh namespace: exactly the limit succeed.
	race := NewStore(cli, testNS(t)).WithLimit(5)
	const n = 20
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			// ErrBusy (changed concurrently too often) is a retryable
			// answer; the caller's retry is this loop
			for {
				_, _, errs[i] = race.Put(ctx, fmt.Sprintf("s%02d", i), spec)
				if !errors.Is(errs[i], ErrBusy) {
					return
				}
			}
		})
	}
	wg.Wait()
	ok, full := 0, 0
	for i, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, ErrTooMany):
			full++
		default:
			t.Errorf("create s%02d: %v", i, err)
		}
	}
	snap, err := race.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ok != 5 || full != n-5 || len(snap.Schedules) != 5 {
		t.Fatalf("concurrent creates: %d created, %d refused, %d stored; want 5, %d, 5", ok, full, len(snap.Schedules), n-5)
	}
}

// TestStoreListPages: a walk page by page sees every schedule that exists
// throughout it exactly once, in id order, while other schedules are
// created and deleted meanwhile.
func TestStoreListPages(t *testing.T) {
	cli := testenv.StartEtcd(t).Client(t)
	ctx := t.Context()
	st := NewStore(cli, testNS(t))
	spec := Spec{Cron: "@hourly", Task: Template{Type: "t"}}
	var want []string
	for i := range 57 {
		id := fmt.Sprintf("s%03d", i*2) // even: there from the start
		want = append(want, id)
		if _, _, err := st.Put(ctx, id, spec); err != nil {
			t.Fatal(err)
		}
	}
	var seen []string
	after, pages := "", 0
	for {
		p, err := st.List(ctx, after, 10)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, s := range p.Schedules {
			seen = append(seen, s.ID)
		}
		// meanwhile: odd ids are created on both sides of the cursor,
		// and a transient one comes and goes
		for _, i := range []int{pages*7 - 1, 111 - pages*3} {
			if _, _, err := st.Put(ctx, fmt.Sprintf("s%03d", i), spec); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := st.Put(ctx, "tmp", spec); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Delete(ctx, "tmp"); err != nil {
			t.Fatal(err)
		}
		if !p.More {
			break
		}
		if pages > 30 {
			t.Fatal("the walk does not end")
		}
		after = p.Last
	}
	if !slices.IsSorted(seen) || len(slices.Compact(slices.Clone(seen))) != len(seen) {
		t.Fatalf("pages not in strict id order: %v", seen)
	}
	for _, id := range want {
		if _, ok := slices.BinarySearch(seen, id); !ok {
			t.Errorf("%s was there throughout and not seen", id)
		}
	}
	if pages < 6 {
		t.Fatalf("%d pages for %d schedules of 10 a page", pages, len(seen))
	}
}
