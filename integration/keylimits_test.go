package integration

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/client"
)

// runLog is a webhook that works for a while on each task and keeps when
// each run started and ended, by task id (every run, completed or not).
type runLog struct {
	work time.Duration
	mu   sync.Mutex
	runs map[string][]run
}

type run struct {
	id         string
	worker     string
	start, end time.Time
}

func newRunLog(work time.Duration) *runLog { return &runLog{work: work, runs: map[string][]run{}} }

func (l *runLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rn := run{id: r.Header.Get("Dq-Id"), start: time.Now()}
	rn.worker, _ = strings.CutPrefix(r.URL.Path, "/hook/")
	select {
	case <-time.After(l.work):
	case <-r.Context().Done():
	}
	rn.end = time.Now()
	l.mu.Lock()
	l.runs[rn.id] = append(l.runs[rn.id], rn)
	l.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (l *runLog) wait(t *testing.T, ids []string, timeout time.Duration) map[string][]run {
	t.Helper()
	waitFor(t, timeout, fmt.Sprintf("all %d tasks run", len(ids)), func() (bool, string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		n := 0
		for _, id := range ids {
			if len(l.runs[id]) > 0 {
				n++
			}
		}
		return n == len(ids), fmt.Sprintf("%d of %d run", n, len(ids))
	})
	time.Sleep(500 * time.Millisecond) // a duplicate run would show now
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string][]run, len(l.runs))
	for k, v := range l.runs {
		out[k] = slices.Clone(v)
	}
	return out
}

// TestKeyLimits runs limit rules with a key or header scope through the
// real binaries, two work processes sharing them through Redis (issue 45).
func TestKeyLimits(t *testing.T) {
	hook := newRunLog(150 * time.Millisecond)
	// handler slots for every task this test has in flight at once: a
	// start is then its admission plus the call, never a wait for a free
	// slot behind other 150 ms calls (with the default 16 per worker, a
	// loaded CI machine started two of a tenant's tasks 130 ms apart,
	// admitted by its 4/s bucket at least 250 ms apart)
	c := localProvisioner{}.Start(t, Spec{Daemons: 1, Events: 1, Workers: 2, Webhook: hook,
		Env: map[string]string{"DQ_WORK_CONCURRENCY": "256"}})
	api := newAPI(c, 0)
	putLimit(t, c.DaemonURL(0), "it.keyed", `{"scope":"key","concurrency":{"limit":1,"slot_ttl":"30s"}}`)
	putLimit(t, c.DaemonURL(0), "it.tenant", `{"scope":"header:tenant","token_bucket":{"rate":4,"burst":1}}`)
	putLimit(t, c.DaemonURL(0), "it.quota", `{"scope":"key","window_quota":{"limit":3,"window":"2s"}}`)
	time.Sleep(time.Second) // the rules reach the workers (etcd watch)

	// 10 keys x 15 tasks of one type, interleaved: a key's n-th task is
	// due 50n ms after the first, all 150 within 0.7 s, far less than the
	// 2.25 s a key's tasks take one at a time: all but the first of a key
	// are deferred at least once, and their order is the limiter's (the
	// tasks of a key sit on different shards, fired by different pollers:
	// tasks due closer than the firing lag may reach the workers, and
	// start, in the order they fired; docs/api.md "Rate limits").
	base := time.Now().Add(2 * time.Second).Truncate(time.Millisecond)
	var keyed []client.Task
	for n := range 15 {
		for k := range 10 {
			keyed = append(keyed, client.Task{ID: fmt.Sprintf("kl-k%02d-%02d", k, n), Type: "it.keyed",
				Key: fmt.Sprintf("k%02d", k), Payload: []byte(`{}`), DueAt: base.Add(time.Duration(50*n) * time.Millisecond)})
		}
	}
	// fairness: a hot key with a backlog of 30 tasks due at once, and 9
	// other keys with one task each due at the same moment
	for n := range 30 {
		keyed = append(keyed, client.Task{ID: fmt.Sprintf("kl-hot-%02d", n), Type: "it.keyed", Key: "hot",
			Payload: []byte(`{}`), DueAt: base})
	}
	for k := range 9 {
		keyed = append(keyed, client.Task{ID: fmt.Sprintf("kl-cold-%d", k), Type: "it.keyed", Key: fmt.Sprintf("cold%d", k),
			Payload: []byte(`{}`), DueAt: base})
	}
	// two tenants x 12 tasks at 4/s each; two keys x 9 tasks at 3 per 2 s
	var tenant, quota []client.Task
	for n := range 12 {
		for _, tn := range []string{"a", "b"} {
			tenant = append(tenant, client.Task{ID: fmt.Sprintf("kl-t%s-%02d", tn, n), Type: "it.tenant",
				Headers: map[string]string{"tenant": tn}, Payload: []byte(`{}`), DueAt: base})
		}
	}
	for n := range 9 {
		for _, k := range []string{"x", "y"} {
			quota = append(quota, client.Task{ID: fmt.Sprintf("kl-q%s-%02d", k, n), Type: "it.quota", Key: k,
				Payload: []byte(`{}`), DueAt: base})
		}
	}
	var ids []string
	for _, batch := range [][]client.Task{keyed, tenant, quota} {
		ids = append(ids, keys(scheduleBatch(t, api, batch))...)
	}
	runs := hook.wait(t, ids, 90*time.Second)

	// each task ran once
	for _, id := range ids {
		if n := len(runs[id]); n != 1 {
			t.Errorf("%s ran %d times", id, n)
		}
	}

	t.Run("concurrency 1 per key, in due order", func(t *testing.T) {
		byKey := map[string][]run{}
		var all []run
		for _, tk := range keyed {
			if !strings.HasPrefix(tk.ID, "kl-k") {
				continue
			}
			if rs := runs[tk.ID]; len(rs) > 0 {
				byKey[tk.Key] = append(byKey[tk.Key], rs[0])
				all = append(all, rs[0])
			}
		}
		for k, rs := range byKey {
			// in due order: the ids sort as the due times do
			sort.Slice(rs, func(i, j int) bool { return rs[i].start.Before(rs[j].start) })
			for i := 1; i < len(rs); i++ {
				if rs[i].id < rs[i-1].id {
					t.Errorf("key %s: %s started before %s, which is due earlier", k, rs[i-1].id, rs[i].id)
				}
				if rs[i].start.Before(rs[i-1].end) {
					t.Errorf("key %s: %s (from %s) overlapped %s (until %s)", k, rs[i].id,
						rs[i].start.Format("15:04:05.000"), rs[i-1].id, rs[i-1].end.Format("15:04:05.000"))
				}
			}
		}
		// keys run side by side: the most keys running at one moment
		most := 0
		for _, r := range all {
			running := map[string]bool{}
			for _, o := range all {
				if !o.start.After(r.start) && o.end.After(r.start) {
					running[o.id[:len("kl-k00")]] = true
				}
			}
			most = max(most, len(running))
		}
		if most < 5 {
			t.Errorf("at most %d keys ran at once, want at least 5", most)
		}
		sort.Slice(all, func(i, j int) bool { return all[i].end.Before(all[j].end) })
		t.Logf("150 tasks of 10 keys (150 ms each, 1 per key): done %v after due; up to %d keys at once",
			all[len(all)-1].end.Sub(base).Round(time.Millisecond), most)
	})

	t.Run("a hot key does not starve the others", func(t *testing.T) {
		var worst time.Duration
		for k := range 9 {
			if rs := runs[fmt.Sprintf("kl-cold-%d", k)]; len(rs) > 0 {
				worst = max(worst, rs[0].start.Sub(base))
			}
		}
		var hot []run
		for n := range 30 {
			hot = append(hot, runs[fmt.Sprintf("kl-hot-%02d", n)]...)
		}
		sort.Slice(hot, func(i, j int) bool { return hot[i].start.Before(hot[j].start) })
		for i := 1; i < len(hot); i++ {
			if hot[i].start.Before(hot[i-1].end) {
				t.Errorf("hot key: %s overlapped %s", hot[i].id, hot[i-1].id)
			}
		}
		// the bound documented in docs/operations.md ("Limits per key")
		if worst > 2*time.Second {
			t.Errorf("with a hot key's 30 tasks due at once, another key's task due at the same moment started %v late", worst)
		}
		t.Logf("fairness: 9 other keys' tasks started at most %v after their due time, beside a hot key's 30 (its last started %v after)",
			worst.Round(time.Millisecond), hot[len(hot)-1].start.Sub(base).Round(time.Millisecond))
	})

	t.Run("token bucket per tenant header across two workers", func(t *testing.T) {
		for _, tn := range []string{"a", "b"} {
			var starts []time.Time
			workers := map[string]bool{}
			for n := range 12 {
				if rs := runs[fmt.Sprintf("kl-t%s-%02d", tn, n)]; len(rs) > 0 {
					starts = append(starts, rs[0].start)
					workers[rs[0].worker] = true
				}
			}
			slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
			// at most burst + rate x elapsed starts in any span (50 ms
			// of slack for the clocks of the webhook and of Redis)
		spans:
			for i := range starts {
				for j := i + 1; j < len(starts); j++ {
					if allowed := 1 + 4*(starts[j].Sub(starts[i])+50*time.Millisecond).Seconds(); float64(j-i+1) > allowed+1e-9 {
						t.Errorf("tenant %s: %d tasks started within %v (bucket 4/s, burst 1 allows %.1f)", tn, j-i+1, starts[j].Sub(starts[i]), allowed)
						break spans
					}
				}
			}
			t.Logf("tenant %s: 12 tasks at 4/s over %v, on workers %v", tn, starts[len(starts)-1].Sub(starts[0]).Round(time.Millisecond), workers)
		}
	})

	t.Run("window quota per key", func(t *testing.T) {
		for _, k := range []string{"x", "y"} {
			var starts []time.Time
			for n := range 9 {
				if rs := runs[fmt.Sprintf("kl-q%s-%02d", k, n)]; len(rs) > 0 {
					starts = append(starts, rs[0].start)
				}
			}
			slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
			// 3 per window aligned on Redis' clock: 9 tasks need three
			// windows (the first and the last start more than a window
			// apart), and less than a window holds at most two windows'
			// worth (a window's end and the next one's start)
			if span := starts[len(starts)-1].Sub(starts[0]); span < 2*time.Second {
				t.Errorf("key %s: 9 tasks at 3 per 2 s started within %v", k, span)
			}
			for i := range starts {
				for j := i + 6; j < len(starts); j++ {
					if starts[j].Sub(starts[i]) < 2*time.Second-100*time.Millisecond {
						t.Errorf("key %s: %d tasks started within %v", k, j-i+1, starts[j].Sub(starts[i]))
					}
				}
			}
			t.Logf("key %s: 9 tasks at 3 per 2 s over %v", k, starts[len(starts)-1].Sub(starts[0]).Round(time.Millisecond))
		}
	})
}
