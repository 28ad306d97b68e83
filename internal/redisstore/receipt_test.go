package redisstore

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

func TestReceiptRoundTrip(t *testing.T) {
	a := Ack{ID: "x", Gen: 1<<32 - 1, Attempt: 7, DueAt: task.FromMillis(1_700_000_000_123), FiredAt: task.FromMillis(1_700_000_000_456),
		Partition: 2_000_000_001, Offset: 1<<62 + 5, Token: 1<<40 + 3, Delivered: true}
	r := unpackReceipt(a.pack())
	want := task.Receipt{FiredAt: a.FiredAt, DueAt: a.DueAt, Partition: a.Partition, Offset: a.Offset, Attempt: 7, Gen: a.Gen, Token: a.Token, Delivered: true}
	if r == nil || *r != want {
		t.Fatalf("round trip: %+v, want %+v", r, want)
	}
	a.Delivered = false
	if r := unpackReceipt(a.pack()); r == nil || r.Delivered {
		t.Fatalf("fired kind: %+v", r)
	}
	for _, bad := range []string{"", "d", "x" + a.pack()[1:], a.pack() + "!"} {
		if r := unpackReceipt(bad); r != nil {
			t.Fatalf("%q read as a receipt: %+v", bad, r)
		}
	}
}

// The fire receipt and the delivered state (settle.lua, claim.lua,
// take.lua's purge, readRecord, List).
func TestDeliveredAndReceipts(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := r.Client(t)

	fire1 := func(t *testing.T, s *Store, id string) (Taken, *task.Task) {
		t.Helper()
		schedule1(t, s, mk(id, time.Now().Add(-time.Second)))
		tk := mustTake(t, s, s.Shard(id), 1)
		if len(tk.Tasks) != 1 || tk.Tasks[0].ID != id {
			t.Fatalf("take: %+v", tk.Tasks)
		}
		return tk, tk.Tasks[0]
	}
	ack := func(tk *task.Task, delivered bool, offset int64) Ack {
		return Ack{ID: tk.ID, Gen: tk.Gen, Attempt: max(tk.Attempt, 1), DueAt: tk.DueAt, FiredAt: task.FromMillis(time.Now().UnixMilli()),
			Partition: 3, Offset: offset, Token: 1, Delivered: delivered}
	}
	settle := func(t *testing.T, s *Store, tk Taken, acks ...Ack) Settled {
		t.Helper()
		r, err := s.SettleAcks(t.Context(), s.Shard(tk.Tasks[0].ID), 1, tk.Lease, nil, acks)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	get := func(t *testing.T, s *Store, id string) *task.Task {
		t.Helper()
		got, err := s.Get(t.Context(), id)
		if err != nil {
			t.Fatalf("get %s: %v", id, err)
		}
		return got
	}
	claim := func(t *testing.T, s *Store, id string, gen uint64, owner string) ClaimResult {
		t.Helper()
		res, err := s.ClaimMany(t.Context(), []Claim{{ID: id, Gen: gen, TTL: time.Minute, Owner: owner}})
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	finish := func(t *testing.T, s *Store, f Finish) {
		t.Helper()
		if _, err := s.FinishMany(t.Context(), []Finish{f}); err != nil {
			t.Fatal(err)
		}
	}
	listed := func(t *testing.T, s *Store, st task.State) map[string]bool {
		t.Helper()
		p, err := s.List(t.Context(), ListQuery{State: st, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, l := range p.Tasks {
			out[l.Task.ID] = true
		}
		return out
	}

	t.Run("AWorkedTopicsTaskStaysFiredWithItsReceipt", func(t *testing.T) {
		s := newStore(t, rdb, Options{})
		tk, f := fire1(t, s, "w")
		a := ack(f, false, 41)
		if r := settle(t, s, tk, a); r.Fired != 1 || !r.Stored {
			t.Fatalf("settle: %+v", r)
		}
		got := get(t, s, "w")
		want := task.Receipt{FiredAt: a.FiredAt, DueAt: f.DueAt, Partition: 3, Offset: 41, Attempt: 1, Gen: f.Gen, Token: 1}
		if got.State != task.StateFired || got.Receipt == nil || *got.Receipt != want {
			t.Fatalf("get: %s %+v, want fired with %+v", got.State, got.Receipt, want)
		}
		// kept after the worker's outcome
		claim(t, s, "w", f.Gen, "o")
		finish(t, s, Finish{ID: "w", Gen: f.Gen, Kind: Succeeded, Owner: "o"})
		if got := get(t, s, "w"); got.State != task.StateSucceeded || got.Receipt == nil || got.Receipt.Offset != 41 {
			t.Fatalf("after success: %s %+v", got.State, got.Receipt)
		}
	})

	t.Run("AnUnworkedTopicsTaskEndsDeliveredListedThenPurged", func(t *testing.T) {
		s := newStore(t, rdb, Options{Retention: 300 * time.Millisecond})
		tk, f := fire1(t, s, "d")
		if r := settle(t, s, tk, ack(f, true, 7)); !r.Stored {
			t.Fatalf("settle: %+v", r)
		}
		got := get(t, s, "d")
		if got.State != task.StateDelivered || got.Receipt == nil || !got.Receipt.Delivered || got.Receipt.Offset != 7 {
			t.Fatalf("get: %s %+v", got.State, got.Receipt)
		}
		if l := listed(t, s, task.StateDelivered); !l["d"] {
			t.Fatalf("not listed as delivered: %v", l)
		}
		if l := listed(t, s, task.StateSucceeded); l["d"] {
			t.Fatal("listed as succeeded")
		}
		if l := listed(t, s, task.StateFired); l["d"] {
			t.Fatal("listed as fired")
		}
		// terminal: cancel and reschedule refuse it, the lease's expiry
		// does not fire it again
		var se *StateError
		if err := s.Cancel(t.Context(), "d"); !errors.As(err, &se) || se.State != task.StateDelivered {
			t.Fatalf("cancel: %v, want a conflict naming delivered", err)
		}
		if _, err := s.Reschedule(t.Context(), "d", time.Now().Add(time.Hour), 0, false); !errors.As(err, &se) || se.State != task.StateDelivered {
			t.Fatalf("reschedule: %v, want a conflict naming delivered", err)
		}
		again := mk("d", time.Now().Add(-time.Second))
		if r := schedule1(t, s, again); r.State != task.StateDelivered {
			t.Fatalf("the same task submitted again: %+v, want its state delivered", r)
		}
		time.Sleep(400 * time.Millisecond)
		for range 2 * purgeEvery {
			if again := mustTake(t, s, s.Shard("d"), 1); len(again.Tasks) != 0 {
				t.Fatalf("fired again: %+v", again.Tasks)
			}
		}
		if _, err := s.Get(t.Context(), "d"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("get after the retention: %v", err)
		}
		if n, err := s.rdb.HLen(t.Context(), s.k.receipts(s.Shard("d"))).Result(); err != nil || n != 0 {
			t.Fatalf("receipts left after the purge: %d %v", n, err)
		}
	})

	// a worker that got the copy before the settle decides: the settle
	// leaves the task as the worker made it
	t.Run("NotDeliveredWhenAWorkerGotThereFirst", func(t *testing.T) {
		s := newStore(t, rdb, Options{})
		cases := []struct {
			id   string
			do   func(t *testing.T, f *task.Task)
			want task.State
		}{
			{"claimed", func(t *testing.T, f *task.Task) { claim(t, s, f.ID, f.Gen, "o") }, task.StateFired},
			{"succeeded", func(t *testing.T, f *task.Task) {
				claim(t, s, f.ID, f.Gen, "o")
				finish(t, s, Finish{ID: f.ID, Gen: f.Gen, Kind: Succeeded, Owner: "o"})
			}, task.StateSucceeded},
			{"retried", func(t *testing.T, f *task.Task) {
				claim(t, s, f.ID, f.Gen, "o")
				finish(t, s, Finish{ID: f.ID, Gen: f.Gen, Kind: Retry, Owner: "o", Delay: time.Hour, Relative: true, Error: "boom"})
			}, task.StateRetrying},
			{"dead", func(t *testing.T, f *task.Task) {
				claim(t, s, f.ID, f.Gen, "o")
				finish(t, s, Finish{ID: f.ID, Gen: f.Gen, Kind: Dead, Owner: "o", Error: "boom"})
			}, task.StateDead},
		}
		for _, c := range cases {
			tk, f := fire1(t, s, c.id)
			c.do(t, f)
			settle(t, s, tk, ack(f, true, 1))
			got := get(t, s, c.id)
			if got.State != c.want || got.Receipt == nil || got.Receipt.Offset != 1 {
				t.Fatalf("%s: %s %+v, want %s with its receipt", c.id, got.State, got.Receipt, c.want)
			}
			if l := listed(t, s, task.StateDelivered); l[c.id] {
				t.Fatalf("%s listed as delivered", c.id)
			}
		}
	})

	// the worker of its topic started after it fired: it still runs it
	t.Run("AWorkerThatArrivesLaterRunsADeliveredTask", func(t *testing.T) {
		s := newStore(t, rdb, Options{})
		tk, f := fire1(t, s, "late")
		settle(t, s, tk, ack(f, true, 9))
		if r := claim(t, s, "late", f.Gen, "o"); r.Code != Claimed {
			t.Fatalf("claim of a delivered task: %+v", r)
		}
		if got := get(t, s, "late"); got.State != task.StateFired || got.Receipt == nil {
			t.Fatalf("claimed: %s %+v", got.State, got.Receipt)
		}
		// a second worker's copy finds it held, the owner's retry of the
		// claim finds it its own
		if r := claim(t, s, "late", f.Gen, "other"); r.Code == Claimed {
			t.Fatalf("claimed twice: %+v", r)
		}
		if r := claim(t, s, "late", f.Gen, "o"); r.Code != Claimed {
			t.Fatalf("owner's retry: %+v", r)
		}
		finish(t, s, Finish{ID: "late", Gen: f.Gen, Kind: Succeeded, Owner: "o"})
		if got := get(t, s, "late"); got.State != task.StateSucceeded || got.Receipt == nil || got.Receipt.Offset != 9 {
			t.Fatalf("finished: %s %+v", got.State, got.Receipt)
		}
		if r := claim(t, s, "late", f.Gen, "o2"); r.Code == Claimed {
			t.Fatalf("a succeeded task claimed again: %+v", r)
		}
	})

	// ?state=delivered walks the bucket hashes: its cursor pages through
	t.Run("DeliveredTasksArePaged", func(t *testing.T) {
		s := newStore(t, rdb, Options{Shards: 2})
		want := map[string]bool{}
		for i := range 30 {
			id := fmt.Sprintf("pg-%02d", i)
			tk, f := fire1(t, s, id)
			settle(t, s, tk, ack(f, true, int64(i)))
			want[id] = true
		}
		got := map[string]int{}
		q := ListQuery{State: task.StateDelivered, Limit: 7}
		for pages := 0; ; pages++ {
			if pages > 20 {
				t.Fatal("more than 20 pages")
			}
			p, err := s.List(t.Context(), q)
			if err != nil {
				t.Fatalf("page %d: %v", pages, err)
			}
			for _, l := range p.Tasks {
				got[l.Task.ID]++
			}
			if p.Next == "" {
				break
			}
			q.Cursor = p.Next
		}
		for id := range want {
			if got[id] != 1 {
				t.Errorf("%s listed %d times", id, got[id])
			}
		}
		if len(got) != len(want) {
			t.Errorf("listed %d tasks, want %d", len(got), len(want))
		}
	})

	// a work process that claimed a delivered task runs it: its purge list
	// leaves it alone, and its outcome decides
	t.Run("AClaimedDeliveredTaskOutlivesItsPurgeList", func(t *testing.T) {
		s := newStore(t, rdb, Options{Retention: 200 * time.Millisecond})
		tk, f := fire1(t, s, "run")
		settle(t, s, tk, ack(f, true, 5))
		claim(t, s, "run", f.Gen, "o")
		time.Sleep(300 * time.Millisecond)
		for range 2 * purgeEvery {
			mustTake(t, s, s.Shard("run"), 1)
		}
		if got := get(t, s, "run"); got.State != task.StateFired {
			t.Fatalf("after its purge list's retention: %s, want fired (a worker runs it)", got.State)
		}
		if n, _ := s.rdb.ZCard(t.Context(), s.k.delivered(s.Shard("run"))).Result(); n != 0 {
			t.Fatalf("%d purge lists left", n)
		}
		finish(t, s, Finish{ID: "run", Gen: f.Gen, Kind: Succeeded, Owner: "o"})
		if got := get(t, s, "run"); got.State != task.StateSucceeded || got.Receipt == nil {
			t.Fatalf("finished: %s %+v", got.State, got.Receipt)
		}
		time.Sleep(300 * time.Millisecond)
		for range 2 * purgeEvery {
			mustTake(t, s, s.Shard("run"), 1)
		}
		if _, err := s.Get(t.Context(), "run"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("after the success's retention: %v", err)
		}
	})

	// a burst of deliveries whose retention ends together is purged at
	// purgeBacklog per take, not purgePerTake per purgeEvery takes
	t.Run("ABacklogOfExpiredRecordsIsPurgedSoon", func(t *testing.T) {
		s := newStore(t, rdb, Options{Shards: 1, Retention: 50 * time.Millisecond})
		const n = 2500
		for i := 0; i < n; i += 500 {
			var subs []Submit
			for j := i; j < i+500; j++ {
				subs = append(subs, Submit{Task: mk(fmt.Sprintf("b-%d", j), time.Now().Add(-time.Second))})
			}
			if _, err := s.Schedule(t.Context(), subs); err != nil {
				t.Fatal(err)
			}
			tk, err := s.Take(t.Context(), 0, 1, 500, time.Minute)
			if err != nil || len(tk.Tasks) != 500 {
				t.Fatalf("take: %d %v", len(tk.Tasks), err)
			}
			acks := make([]Ack, len(tk.Tasks))
			for k, f := range tk.Tasks {
				acks[k] = ack(f, true, int64(k))
			}
			if r := settle(t, s, tk, acks...); !r.Stored || r.Fired != 500 {
				t.Fatalf("settle: %+v", r)
			}
		}
		time.Sleep(100 * time.Millisecond)
		takes := 0
		for ; takes < 20; takes++ {
			left, err := s.rdb.HLen(t.Context(), s.k.receipts(0)).Result()
			if err != nil {
				t.Fatal(err)
			}
			if left == 0 {
				break
			}
			mustTake(t, s, 0, 1)
		}
		// purgeEvery takes to find the backlog, then purgeBacklog each
		if most := purgeEvery + n/purgeBacklog + 2; takes > most {
			t.Fatalf("%d takes to purge %d expired records, want at most %d", takes, n, most)
		}
		if n, _ := s.rdb.HLen(t.Context(), s.k.receipts(0)).Result(); n != 0 {
			t.Fatalf("%d receipts left", n)
		}
	})

	// a growth moves delivered tasks as finished ones, receipts along:
	// it never waits on them (no worker would finish them)
	t.Run("AGrowthMovesDeliveredTasksWithTheirReceipts", func(t *testing.T) {
		s := newStore(t, rdb, Options{Shards: 2})
		var ids []string
		for i := 0; len(ids) < 20; i++ {
			id := fmt.Sprintf("g-%d", i)
			if _, moving := s.Map().Grown(8).Old(id); moving {
				ids = append(ids, id)
			}
		}
		for i, id := range ids {
			tk, f := fire1(t, s, id)
			settle(t, s, tk, ack(f, true, int64(100+i)))
		}
		m := grow(t, s, 8)
		if moved := moveAll(t, s, m, 1); moved != len(ids) {
			t.Fatalf("moved %d of %d", moved, len(ids))
		}
		for i, id := range ids {
			got := get(t, s, id)
			if got.State != task.StateDelivered || got.Shard != m.Shard(id) || got.Receipt == nil || got.Receipt.Offset != int64(100+i) {
				t.Fatalf("%s after the move: %s shard %d %+v", id, got.State, got.Shard, got.Receipt)
			}
		}
		for o := range 2 {
			if n, _ := s.rdb.HLen(t.Context(), s.k.receipts(o)).Result(); n != 0 {
				t.Fatalf("shard %d keeps %d receipts of moved tasks", o, n)
			}
		}
	})
}

// taken_state (common.lua) names the receipts hash from the done set's key.
func TestReceiptsKeyNextToDone(t *testing.T) {
	k := newKeys("ns")
	for _, sh := range []int{0, 7} {
		if got := strings.TrimSuffix(k.done(sh), "done") + "rcpt"; got != k.receipts(sh) {
			t.Fatalf("shard %d: %s, want %s", sh, got, k.receipts(sh))
		}
	}
}
