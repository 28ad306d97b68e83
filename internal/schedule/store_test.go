package schedule

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/delayq/delayq/internal/testenv"
)

func TestStoreLifecycle(t *testing.T) {
	e := testenv.StartEtcd(t)
	cli := e.Client(t)
	ctx := t.Context()
	st := NewStore(cli, testNS(t))
	clock := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	st.now = func() time.Time { return clock }

	spec := Spec{Cron: "*/5 * * * * *", Timezone: "Europe/Berlin", Task: Template{Type: "report"}}
	sch, created, err := st.Put(ctx, "nightly", spec)
	if err != nil || !created || sch.Revision == 0 || !sch.CreatedAt.Equal(clock) {
		t.Fatalf("Put new = %+v %v %v", sch, created, err)
	}
	clock = clock.Add(time.Minute)
	spec.Catchup = CatchupNone
	sch2, created, err := st.Put(ctx, "nightly", spec)
	if err != nil || created || sch2.Revision <= sch.Revision || !sch2.CreatedAt.Equal(sch.CreatedAt) || !sch2.UpdatedAt.Equal(clock) {
		t.Fatalf("Put again = %+v %v %v", sch2, created, err)
	}
	// the same spec again writes nothing: the revision (and the scheduler's
	// catch-up, which a revision change resets) stays
	clock = clock.Add(time.Minute)
	same, created, err := st.Put(ctx, "nightly", spec)
	if err != nil || created || same.Revision != sch2.Revision || !same.UpdatedAt.Equal(sch2.UpdatedAt) {
		t.Fatalf("Put unchanged = %+v %v %v, want revision %d", same, created, err, sch2.Revision)
	}
	got, err := st.Get(ctx, "nightly")
	if err != nil || got.Revision != sch2.Revision || got.Catchup != CatchupNone || got.Timezone != "Europe/Berlin" {
		t.Fatalf("Get = %+v %v", got, err)
	}

	// bad input changes nothing
	if _, _, err := st.Put(ctx, "nightly", Spec{Cron: "bad", Task: Template{Type: "x"}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Put bad cron = %v", err)
	}
	if _, _, err := st.Put(ctx, "a/b", spec); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Put bad id = %v", err)
	}
	if again, _ := st.Get(ctx, "nightly"); again.Revision != sch2.Revision {
		t.Fatal("a refused Put changed the schedule")
	}

	p, changed, err := st.SetPaused(ctx, "nightly", true)
	if err != nil || !changed || !p.Paused || p.Revision <= sch2.Revision {
		t.Fatalf("pause = %+v %v %v", p, changed, err)
	}
	if _, changed, err := st.SetPaused(ctx, "nightly", true); err != nil || changed {
		t.Fatalf("pause again = %v %v", changed, err)
	}
	if _, _, err := st.SetPaused(ctx, "nope", true); !errors.Is(err, ErrNotFound) {
		t.Fatalf("pause missing = %v", err)
	}

	if _, _, err := st.Put(ctx, "hourly", Spec{Cron: "@hourly", Task: Template{Type: "x"}}); err != nil {
		t.Fatal(err)
	}
	// a hand-written value that does not decode is left out and counted
	if _, err := cli.Put(ctx, Key(st.ns, "broken"), "{"); err != nil {
		t.Fatal(err)
	}
	page, err := st.List(ctx, "", 10)
	if list := page.Schedules; err != nil || page.Bad != 1 || page.More || len(list) != 2 || list[0].ID != "hourly" || list[1].ID != "nightly" {
		t.Fatalf("List = %+v %v", page, err)
	}

	// states: written under a fence, read back
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(5))
	if err != nil {
		t.Fatal(err)
	}
	el := concurrency.NewElection(sess, ElectionPrefix(st.ns))
	if err := el.Campaign(ctx, "me"); err != nil {
		t.Fatal(err)
	}
	fence := clientv3.Compare(clientv3.CreateRevision(el.Key()), ">", 0)
	s1 := State{SpecRev: p.Revision, Through: 1000}
	s1.AddRecent(900, 500, 900, 700)
	if err := st.WriteStates(ctx, fence, map[string]State{"nightly": s1, "hourly": {Through: 5}}, nil); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := st.State(ctx, "nightly"); err != nil || !ok || got.Through != 1000 || len(got.Recent) != 3 {
		t.Fatalf("State = %+v %v %v", got, ok, err)
	}
	if lf, ok := s1.LastFired(time.UnixMilli(800)); !ok || lf.UnixMilli() != 700 {
		t.Fatalf("LastFired = %v %v", lf, ok)
	}
	snap, err := st.Load(ctx)
	if err != nil || len(snap.Schedules) != 2 || len(snap.States) != 2 || len(snap.Bad) != 1 || snap.Bad[0] != "broken" ||
		snap.States["hourly"].Through != 5 || snap.Rev == 0 {
		t.Fatalf("Load = %+v %v", snap, err)
	}
	// a page carries the states of its schedules
	if page, err := st.List(ctx, "broken", 1); err != nil || len(page.Schedules) != 1 || page.Schedules[0].ID != "hourly" ||
		!page.More || page.Last != "hourly" || page.States["hourly"].Through != 5 || len(page.States) != 1 {
		t.Fatalf("List after broken = %+v %v", page, err)
	}
	// many states go in several fenced transactions
	many := make(map[string]State)
	for i := range 250 {
		many[string(rune('a'+i%26))+time.Duration(i).String()] = State{Through: int64(i)}
	}
	if err := st.WriteStates(ctx, fence, many, []string{"hourly"}); err != nil {
		t.Fatal(err)
	}
	if snap, _ = st.Load(ctx); len(snap.States) != 251 {
		t.Fatalf("after a large write: %d states", len(snap.States))
	}
	// losing the leadership fails the fence: nothing is written
	if err := sess.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.WriteStates(ctx, fence, map[string]State{"nightly": {Through: 2000}}, nil); !errors.Is(err, ErrFenced) {
		t.Fatalf("WriteStates after the session ended = %v", err)
	}
	if got, _, _ := st.State(ctx, "nightly"); got.Through != 1000 {
		t.Fatalf("a fenced-out write landed: %+v", got)
	}

	if ok, err := st.Delete(ctx, "nightly"); err != nil || !ok {
		t.Fatalf("Delete = %v %v", ok, err)
	}
	if ok, err := st.Delete(ctx, "nightly"); err != nil || ok {
		t.Fatalf("Delete again = %v %v", ok, err)
	}
	if _, err := st.Get(ctx, "nightly"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get deleted = %v", err)
	}

	// etcd down: an infrastructure error, never ErrInvalid or ErrNotFound
	e.Stop(t)
	tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var ee *EtcdError
	if _, err := st.Get(tctx, "hourly"); !errors.As(err, &ee) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrInvalid) {
		t.Fatalf("Get with etcd down = %v", err)
	}
	if _, _, err := st.Put(tctx, "hourly", spec); !errors.As(err, &ee) || errors.Is(err, ErrInvalid) {
		t.Fatalf("Put with etcd down = %v", err)
	}
}
