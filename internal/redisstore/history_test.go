package redisstore

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// TestAttemptHistory: every retry, death and success appends an entry to
// the task's history in its shard's err hash (history_append in
// common.lua), which GET reads whole and the lists read as the last error.
func TestAttemptHistory(t *testing.T) {
	t.Parallel()
	historySuite(t, testenv.StartRedis(t).Client(t))
}

func TestAttemptHistoryCluster(t *testing.T) {
	t.Parallel()
	historySuite(t, testenv.StartRedisCluster(t).Client(t))
}

// fireOnce takes id (due now) from its shard and claims its fired copy
// for owner: the generation and attempt a worker runs.
func fireOnce(t *testing.T, s *Store, id, owner string) (gen uint64, attempt int) {
	t.Helper()
	var tk Taken
	testenv.WaitFor(t, 5*time.Second, "task "+id+" taken", func() bool {
		tk = mustTake(t, s, s.Shard(id), 1)
		return len(tk.Tasks) > 0
	})
	if len(tk.Tasks) != 1 || tk.Tasks[0].ID != id {
		t.Fatalf("take: %+v, want %s alone", tk.Tasks, id)
	}
	if _, _, err := s.Settle(t.Context(), s.Shard(id), 1, tk.Lease, nil); err != nil {
		t.Fatal(err)
	}
	res, err := s.ClaimMany(t.Context(), []Claim{{ID: id, Gen: tk.Tasks[0].Gen, TTL: time.Minute, Owner: owner}})
	if err != nil || res[0].Code != Claimed {
		t.Fatalf("claim %s: %+v %v", id, res, err)
	}
	return tk.Tasks[0].Gen, res[0].Task.Attempt
}

// checkAttempt compares one history entry with what a test expects;
// ended is checked against the window [from, to] of Redis' clock.
func checkAttempt(t *testing.T, got task.Attempt, att int, outcome, errText string, started, from, to time.Time) {
	t.Helper()
	if got.Attempt != att || got.Outcome != outcome || got.Error != errText {
		t.Fatalf("attempt %+v, want attempt %d %s %q", got, att, outcome, errText)
	}
	if !got.StartedAt.Equal(started.Truncate(time.Millisecond)) {
		t.Fatalf("attempt %d started %v, want %v", att, got.StartedAt, started.Truncate(time.Millisecond))
	}
	if got.EndedAt.Before(from.Truncate(time.Millisecond)) || got.EndedAt.After(to) {
		t.Fatalf("attempt %d ended %v, not within [%v, %v]", att, got.EndedAt, from, to)
	}
}

func getTask(t *testing.T, s *Store, id string) *task.Task {
	t.Helper()
	got, err := s.Get(t.Context(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return got
}

func historySuite(t *testing.T, rdb redis.UniversalClient) {
	t.Run("RetryRetrySuccess", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, rdb, Options{Shards: 2})
		from := redisNow(t, s)
		schedule1(t, s, mk("rrs", from.Add(-time.Second)))
		started := []time.Time{from.Add(-3 * time.Hour), from.Add(-2 * time.Hour), from.Add(-time.Hour)}
		for i, e := range []string{"first failure", "second failure"} {
			gen, att := fireOnce(t, s, "rrs", "w:1")
			if att != i+1 {
				t.Fatalf("run %d: attempt %d", i+1, att)
			}
			mustFinish(t, s, Finish{ID: "rrs", Gen: gen, Kind: Retry, Relative: true, Error: e, Owner: "w:1", Attempt: att, Started: started[i]})
			if got := getTask(t, s, "rrs"); got.State != task.StateRetrying || got.LastError != e || len(got.History) != i+1 {
				t.Fatalf("after retry %d: state %s last error %q history %+v", i+1, got.State, got.LastError, got.History)
			}
		}
		gen, att := fireOnce(t, s, "rrs", "w:1")
		// a lean success: the claim is held, the record is not read
		if st := mustFinish(t, s, Finish{ID: "rrs", Gen: gen, Kind: Succeeded, Owner: "w:1", Attempt: att, Started: started[2]}); st != task.StateSucceeded {
			t.Fatalf("success: %s", st)
		}
		to := redisNow(t, s)
		got := getTask(t, s, "rrs")
		if got.State != task.StateSucceeded || got.LastError != "" || len(got.History) != 3 || got.HistoryDropped != 0 {
			t.Fatalf("succeeded task: state %s last error %q history %+v dropped %d", got.State, got.LastError, got.History, got.HistoryDropped)
		}
		checkAttempt(t, got.History[0], 1, task.OutcomeRetry, "first failure", started[0], from, to)
		checkAttempt(t, got.History[1], 2, task.OutcomeRetry, "second failure", started[1], got.History[0].EndedAt, to)
		checkAttempt(t, got.History[2], 3, task.OutcomeSucceeded, "", started[2], got.History[1].EndedAt, to)
		// the lists show the last error only
		page, err := s.List(t.Context(), ListQuery{State: task.StateSucceeded, Limit: 10})
		if err != nil || len(page.Tasks) != 1 || page.Tasks[0].Task.LastError != "" || page.Tasks[0].Task.History != nil {
			t.Fatalf("list of succeeded: %+v %v", page.Tasks, err)
		}
	})

	t.Run("RecordedSuccessAndDeferral", func(t *testing.T) {
		// a success whose claim is gone reads the record: the record's
		// attempt, not the worker's; a deferral uses no attempt
		t.Parallel()
		s := newStore(t, rdb, Options{Shards: 1})
		now := redisNow(t, s)
		schedule1(t, s, mk("rec", now.Add(-time.Second)))
		gen, att := fireOnce(t, s, "rec", "w:1")
		mustFinish(t, s, Finish{ID: "rec", Gen: gen, Kind: Retry, Relative: true, Error: "e1", Owner: "w:1", Attempt: att, Started: now})
		gen, _ = fireOnce(t, s, "rec", "w:1")
		mustFinish(t, s, Finish{ID: "rec", Gen: gen, Kind: Defer, Relative: true, Owner: "w:1", Attempt: 2, Started: now})
		if got := getTask(t, s, "rec"); len(got.History) != 1 || got.LastError != "e1" || got.Attempt != 2 {
			t.Fatalf("after a deferral: %+v", got)
		}
		gen, _ = fireOnce(t, s, "rec", "w:1")
		if st := mustFinish(t, s, Finish{ID: "rec", Gen: gen, Kind: Succeeded, Attempt: 9, Started: now}); st != task.StateSucceeded {
			t.Fatalf("success: %s", st)
		}
		got := getTask(t, s, "rec")
		if len(got.History) != 2 || got.History[1].Attempt != 2 || got.History[1].Outcome != task.OutcomeSucceeded || got.LastError != "" {
			t.Fatalf("history %+v last error %q, want the record's attempt 2 succeeded", got.History, got.LastError)
		}
	})

	t.Run("Dead", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, rdb, Options{Shards: 1})
		from := redisNow(t, s)
		schedule1(t, s, mk("dies", from.Add(-time.Second)))
		gen, att := fireOnce(t, s, "dies", "w:1")
		mustFinish(t, s, Finish{ID: "dies", Gen: gen, Kind: Retry, Relative: true, Error: "flaky", Owner: "w:1", Attempt: att, Started: from})
		gen, att = fireOnce(t, s, "dies", "w:1")
		mustFinish(t, s, Finish{ID: "dies", Gen: gen, Kind: Dead, Error: "400 bad request", Owner: "w:1", Attempt: att, Started: from})
		to := redisNow(t, s)
		got := getTask(t, s, "dies")
		if got.State != task.StateDead || got.LastError != "400 bad request" || len(got.History) != 2 {
			t.Fatalf("dead task: %+v", got)
		}
		checkAttempt(t, got.History[0], 1, task.OutcomeRetry, "flaky", from, from, to)
		checkAttempt(t, got.History[1], 2, task.OutcomeDead, "400 bad request", from, got.History[0].EndedAt, to)
		dead, err := s.ListDead(t.Context(), 10)
		if err != nil || len(dead) != 1 || dead[0].Task.LastError != "400 bad request" || dead[0].Task.History != nil {
			t.Fatalf("dead list: %+v %v", dead, err)
		}
		// a redrive keeps the history; the next attempts append to it
		if _, err := s.Redrive(t.Context(), "dies"); err != nil {
			t.Fatal(err)
		}
		if got := getTask(t, s, "dies"); got.State != task.StateScheduled || got.LastError != "400 bad request" || len(got.History) != 2 {
			t.Fatalf("redriven: %+v", got)
		}
		gen, att = fireOnce(t, s, "dies", "w:1")
		mustFinish(t, s, Finish{ID: "dies", Gen: gen, Kind: Succeeded, Owner: "w:1", Attempt: att, Started: from})
		// a lean success at the first attempt after the redrive stores
		// nothing (finish.lua): GET shows it without times, and no
		// last_error (the death is the latest stored entry)
		if got := getTask(t, s, "dies"); len(got.History) != 3 || got.History[2] != (task.Attempt{Attempt: 1, Outcome: task.OutcomeSucceeded}) || got.LastError != "" {
			t.Fatalf("after the redrive's success: last_error %q, %+v", got.LastError, got.History)
		}
	})

	t.Run("PoisonDead", func(t *testing.T) {
		// a record that cannot be fired dies without a worker: no start time
		t.Parallel()
		s := newStore(t, rdb, Options{Shards: 1})
		now := redisNow(t, s)
		schedule1(t, s, mk("poison", now.Add(-time.Second)))
		tk := mustTake(t, s, 0, 7)
		out, err := s.SettlePoison(t.Context(), 0, 7, tk.Lease, []Poison{{ID: "poison", Gen: tk.Tasks[0].Gen, DeadAfter: now.Add(-time.Hour), Park: time.Second, Reason: "record too large"}})
		if err != nil || out[0] != PoisonDead {
			t.Fatalf("settle poison: %v %v", out, err)
		}
		got := getTask(t, s, "poison")
		if got.State != task.StateDead || got.LastError != "record too large" || len(got.History) != 1 {
			t.Fatalf("poison: %+v", got)
		}
		a := got.History[0]
		if a.Attempt != 1 || a.Outcome != task.OutcomeDead || a.Error != "record too large" || !a.StartedAt.IsZero() || a.EndedAt.Before(now.Truncate(time.Millisecond)) {
			t.Fatalf("poison attempt: %+v", a)
		}
	})

	t.Run("LegacyLastError", func(t *testing.T) {
		// a plain last error written before the history existed
		t.Parallel()
		s := newStore(t, rdb, Options{Shards: 1})
		now := redisNow(t, s)
		schedule1(t, s, mk("legacy", now.Add(-time.Second)))
		gen, att := fireOnce(t, s, "legacy", "w:1")
		mustFinish(t, s, Finish{ID: "legacy", Gen: gen, Kind: Retry, Relative: true, Error: "new", Owner: "w:1", Attempt: att})
		if err := rdb.HSet(t.Context(), s.k.errs(0), "legacy", "old plain error").Err(); err != nil {
			t.Fatal(err)
		}
		got := getTask(t, s, "legacy")
		want := task.Attempt{Attempt: 1, Outcome: task.OutcomeRetry, Error: "old plain error"}
		if got.LastError != "old plain error" || len(got.History) != 1 || got.History[0] != want {
			t.Fatalf("legacy: last error %q history %+v", got.LastError, got.History)
		}
		page, err := s.List(t.Context(), ListQuery{State: task.StateRetrying, Limit: 10})
		if err != nil || len(page.Tasks) != 1 || page.Tasks[0].Task.LastError != "old plain error" {
			t.Fatalf("list: %+v %v", page.Tasks, err)
		}
		// an append keeps it as the first entry
		gen, att = fireOnce(t, s, "legacy", "w:1")
		mustFinish(t, s, Finish{ID: "legacy", Gen: gen, Kind: Retry, Relative: true, Error: "newer", Owner: "w:1", Attempt: att, Started: now})
		got = getTask(t, s, "legacy")
		if got.LastError != "newer" || len(got.History) != 2 || got.History[0] != want || got.History[1].Attempt != 2 || got.History[1].Error != "newer" {
			t.Fatalf("after an append: last error %q history %+v", got.LastError, got.History)
		}
	})

	t.Run("CapAndDropped", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, rdb, Options{Shards: 1})
		now := redisNow(t, s)
		tk := mk("many", now.Add(-time.Second))
		tk.MaxAttempts = 100
		schedule1(t, s, tk)
		for i := 1; i <= 20; i++ {
			gen, att := fireOnce(t, s, "many", "w:1")
			mustFinish(t, s, Finish{ID: "many", Gen: gen, Kind: Retry, Relative: true, Error: fmt.Sprintf("e%d", i), Owner: "w:1", Attempt: att, Started: now})
		}
		got := getTask(t, s, "many")
		if len(got.History) != 16 || got.HistoryDropped != 4 || got.LastError != "e20" {
			t.Fatalf("%d entries, %d dropped, last error %q; want 16, 4, e20", len(got.History), got.HistoryDropped, got.LastError)
		}
		for i, a := range got.History {
			if a.Attempt != i+5 || a.Error != fmt.Sprintf("e%d", i+5) {
				t.Fatalf("entry %d: %+v, want attempt %d", i, a, i+5)
			}
		}
		// long errors: beyond the newest entry, 8 KiB of entries are kept
		s = newStore(t, rdb, Options{Shards: 1})
		schedule1(t, s, mk("long", now.Add(-time.Second)))
		for i := 1; i <= 6; i++ {
			gen, att := fireOnce(t, s, "long", "w:1")
			mustFinish(t, s, Finish{ID: "long", Gen: gen, Kind: Retry, Relative: true, Error: strings.Repeat(fmt.Sprint(i), 2048), Owner: "w:1", Attempt: att})
		}
		got = getTask(t, s, "long")
		// (4 older entries of 2,065 bytes would be 8,260)
		if len(got.History) != 4 || got.HistoryDropped != 2 || got.History[0].Attempt != 3 || got.LastError != strings.Repeat("6", 2048) {
			t.Fatalf("long errors: %d entries from attempt %d, %d dropped", len(got.History), got.History[0].Attempt, got.HistoryDropped)
		}
	})

	t.Run("LeanSuccessBatch", func(t *testing.T) {
		// one call of lean successes of tasks with and without a history:
		// one HMGET for all of them, and one HSET for those with one (a
		// success at the first attempt records nothing)
		t.Parallel()
		s := newStore(t, rdb, Options{Shards: 1})
		now := redisNow(t, s)
		ids := []string{"b0", "b1", "b2", "b3"}
		for _, id := range ids {
			schedule1(t, s, mk(id, now.Add(-time.Second)))
		}
		tk := mustTake(t, s, 0, 1)
		gens := map[string]uint64{}
		for _, f := range tk.Tasks {
			gens[f.ID] = f.Gen
		}
		// b1 and b3 fail once first
		for _, id := range []string{"b1", "b3"} {
			mustFinish(t, s, Finish{ID: id, Gen: gens[id], Kind: Retry, Due: now.Add(-time.Second), Error: "x " + id, Attempt: 1})
		}
		if tk := mustTake(t, s, 0, 1); len(tk.Tasks) != 2 {
			t.Fatalf("second take: %+v, want b1 and b3", tk.Tasks)
		} else {
			for _, f := range tk.Tasks {
				gens[f.ID] = f.Gen
			}
		}
		var cs []Claim
		var fs []Finish
		for _, id := range ids {
			cs = append(cs, Claim{ID: id, Gen: gens[id], TTL: time.Minute, Owner: "w:2"})
			att := 1
			if id == "b1" || id == "b3" {
				att = 2
			}
			fs = append(fs, Finish{ID: id, Gen: gens[id], Kind: Succeeded, Owner: "w:2", Attempt: att, Started: now})
		}
		if res, err := s.ClaimMany(t.Context(), cs); err != nil || res[3].Code != Claimed {
			t.Fatalf("claims: %+v %v", res, err)
		}
		if res, err := s.FinishMany(t.Context(), fs); err != nil || res[0].State != task.StateSucceeded || res[3].State != task.StateSucceeded {
			t.Fatalf("finish: %+v %v", res, err)
		}
		for _, id := range ids {
			got := getTask(t, s, id)
			if id == "b0" || id == "b2" {
				// nothing stored; GET shows the success without times
				if got.State != task.StateSucceeded || len(got.History) != 1 || got.History[0] != (task.Attempt{Attempt: 1, Outcome: task.OutcomeSucceeded}) {
					t.Fatalf("%s, a success at the first attempt: state %s history %+v", id, got.State, got.History)
				}
				if n, err := rdb.HExists(t.Context(), s.k.errs(0), id).Result(); err != nil || n {
					t.Fatalf("%s: an err hash field (%v)", id, err)
				}
				continue
			}
			if len(got.History) != 2 || got.History[0].Error != "x "+id {
				t.Fatalf("%s: history %+v", id, got.History)
			}
			last := got.History[1]
			if got.State != task.StateSucceeded || last.Outcome != task.OutcomeSucceeded || last.Attempt != 2 || !last.StartedAt.Equal(now.Truncate(time.Millisecond)) {
				t.Fatalf("%s: state %s history %+v", id, got.State, got.History)
			}
		}
	})

	t.Run("ReviveStartsAfresh", func(t *testing.T) {
		// a cancelled task revived with new content is a new task: the
		// old one's history is not its own
		t.Parallel()
		s := newStore(t, rdb, Options{Shards: 1})
		now := redisNow(t, s)
		schedule1(t, s, mk("rev", now.Add(-time.Second)))
		gen, att := fireOnce(t, s, "rev", "w:1")
		mustFinish(t, s, Finish{ID: "rev", Gen: gen, Kind: Retry, Due: now.Add(time.Hour), Error: "e1", Owner: "w:1", Attempt: att})
		if err := s.Cancel(t.Context(), "rev"); err != nil {
			t.Fatal(err)
		}
		if got := getTask(t, s, "rev"); got.State != task.StateCancelled || len(got.History) != 1 {
			t.Fatalf("cancelled: %+v", got)
		}
		nt := mk("rev", now.Add(time.Hour))
		nt.Payload = []byte(`{"n":2}`)
		res, err := s.Schedule(t.Context(), []Submit{{Task: nt, Revive: true}})
		if err != nil || res[0].Outcome != Updated {
			t.Fatalf("revive: %+v %v", res, err)
		}
		if got := getTask(t, s, "rev"); got.State != task.StateScheduled || got.History != nil || got.LastError != "" {
			t.Fatalf("revived: %+v", got)
		}
	})

	t.Run("SurvivesAShardMove", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, rdb, Options{Shards: 1})
		now := redisNow(t, s)
		m := s.Map().Grown(8)
		var ids []string // a retrying and a dead task that change shard
		for i := 0; len(ids) < 2; i++ {
			if id := fmt.Sprintf("mv-%d", i); m.Shard(id) != 0 {
				ids = append(ids, id)
			}
		}
		for _, id := range ids {
			schedule1(t, s, mk(id, now.Add(-time.Second)))
			gen, att := fireOnce(t, s, id, "w:1")
			mustFinish(t, s, Finish{ID: id, Gen: gen, Kind: Retry, Due: now.Add(time.Hour), Error: "e " + id, Owner: "w:1", Attempt: att, Started: now})
		}
		if err := s.Cancel(t.Context(), ids[1]); err != nil {
			t.Fatal(err)
		}
		before := map[string]*task.Task{}
		for _, id := range ids {
			before[id] = getTask(t, s, id)
		}
		grow(t, s, 8)
		if n := moveAll(t, s, m, 1); n != 2 {
			t.Fatalf("moved %d tasks, want 2", n)
		}
		for _, id := range ids {
			got := getTask(t, s, id)
			if got.Shard != m.Shard(id) || got.LastError != "e "+id || len(got.History) != 1 || got.History[0] != before[id].History[0] {
				t.Fatalf("%s after the move: shard %d last error %q history %+v, want %+v", id, got.Shard, got.LastError, got.History, before[id].History)
			}
		}
	})
}

// FuzzHistory: the history decoders never panic, and a well-formed
// history's last error is its latest failed entry's.
func FuzzHistory(f *testing.F) {
	f.Add("plain error")
	f.Add("")
	f.Add("\x01\x000000") // no entry: not a history the writer makes
	f.Add("\x01\x01\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x02r\x00\x02ab")
	f.Add("\x01\x02\x00\x00\x00\x03\x00\x01\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x02r\x00\x02ab\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00S\x00\x00")
	f.Fuzz(func(t *testing.T, v string) {
		le := lastError(v)
		tk := &task.Task{Attempt: 3, State: task.StateRetrying}
		setHistory(tk, v)
		if v == "" {
			if len(tk.History) != 0 || le != "" {
				t.Fatalf("empty value: %+v %q", tk.History, le)
			}
			return
		}
		if len(tk.History) == 0 {
			t.Fatalf("%q: no entry", v)
		}
		last := tk.History[len(tk.History)-1]
		if want := map[bool]string{true: "", false: last.Error}[last.Outcome == task.OutcomeSucceeded]; le != want {
			t.Fatalf("%q: last error %q, want %q", v, le, want)
		}
	})
}
