package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/config"
)

// shardsFake implements the daemon's /v1/shards contract (GET and PUT
// with their error answers) over an in-memory map. The daemon's endpoint
// is built alongside dq shards; the end-to-end test against the real
// daemon lives with it. A migration advances by step tasks per GET, not
// with the clock. staleReads GETs after a growth still answer the map
// from before it (a daemon whose view lags), and the GETs numbered in
// fail answer 503.
type shardsFake struct {
	mu         sync.Mutex
	token      string
	noEtcd     bool
	pending    int64
	step       int64
	staleReads int
	fail       map[int]bool
	gets       int
	puts       int
	before     client.ShardMap // the map before the last growth
	m          client.ShardMap
}

func newShardsFake(t *testing.T, count int) (*shardsFake, string) {
	t.Helper()
	f := &shardsFake{token: "tok", pending: 20000, step: 7000, fail: map[int]bool{},
		m: client.ShardMap{Count: count, Previous: count, State: client.ShardsStable, Epoch: 1}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func (f *shardsFake) set(fn func(*shardsFake)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// snapshot is the map and the number of GETs so far.
func (f *shardsFake) snapshot() (client.ShardMap, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m, f.gets
}

func (f *shardsFake) putCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.puts
}

func fakeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": msg}})
	_, _ = w.Write(b)
}

func (f *shardsFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.URL.Path != "/v1/shards" {
		fakeError(w, http.StatusNotFound, "not_found", "no route "+r.URL.Path)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+f.token {
		fakeError(w, http.StatusUnauthorized, "unauthorized", "missing or wrong bearer token")
		return
	}
	if f.noEtcd {
		fakeError(w, http.StatusServiceUnavailable, "unavailable", "the shard map lives in etcd, and no etcd is configured")
		return
	}
	status, answer := http.StatusOK, &f.m
	switch r.Method {
	case http.MethodGet:
		f.gets++
		if f.fail[f.gets] {
			fakeError(w, http.StatusServiceUnavailable, "unavailable", "etcd is not reachable")
			return
		}
		if f.staleReads > 0 {
			f.staleReads--
			answer = &f.before
			break
		}
		if f.m.State == client.ShardsMigrating {
			n := min(f.step, f.m.Remaining)
			f.m.Moved += n
			f.m.Remaining -= n
			if f.m.Remaining == 0 {
				f.m.State = client.ShardsStable
			}
		}
	case http.MethodPut:
		f.puts++
		var req struct {
			Count *int `json:"count"`
		}
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil || req.Count == nil {
			fakeError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("want {\"count\": N}: %v", err))
			return
		}
		n := *req.Count
		switch {
		case f.m.State == client.ShardsMigrating:
			fakeError(w, http.StatusConflict, "conflict", fmt.Sprintf("a migration from %d to %d shards is running", f.m.Previous, f.m.Count))
			return
		case n <= f.m.Count:
			fakeError(w, http.StatusUnprocessableEntity, "invalid_shard_count", fmt.Sprintf("count %d: must be above the current %d", n, f.m.Count))
			return
		case n > 4096:
			fakeError(w, http.StatusUnprocessableEntity, "invalid_shard_count", fmt.Sprintf("count %d: at most 4096", n))
			return
		case n%f.m.Count != 0:
			fakeError(w, http.StatusUnprocessableEntity, "invalid_shard_count", fmt.Sprintf("count %d: must be a multiple of the current %d", n, f.m.Count))
			return
		}
		f.before = f.m
		f.m = client.ShardMap{Count: n, Previous: f.m.Count, State: client.ShardsMigrating, Remaining: f.pending, Epoch: f.m.Epoch + 1}
		status = http.StatusAccepted
	default:
		fakeError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(answer)
}

// exitOf is what the dq binary does with err: its exit code and what it
// prints on stderr.
func exitOf(t *testing.T, err error) (int, string) {
	t.Helper()
	var b bytes.Buffer
	code := config.ExitCode(t.Context(), "dq", err, &b)
	return code, b.String()
}

// TestShardsCommand: dq shards shows the map (a progress row while
// migrating) in text and JSON; dq shards grow N starts a growth and prints
// the answer; the daemon's refusals (409, 422, 401, 503) end dq with a
// non-zero exit that prints the daemon's message.
func TestShardsCommand(t *testing.T) {
	f, base := newShardsFake(t, 16)
	env := map[string]string{"DQ_ADDR": base, "DQ_API_TOKEN": "tok"}

	out, _, err := runDQ(t, env, "shards")
	if err != nil || !regexp.MustCompile(`(?m)^count:\s+16$`).MatchString(out) || !regexp.MustCompile(`(?m)^previous:\s+16$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^state:\s+stable$`).MatchString(out) || !regexp.MustCompile(`(?m)^epoch:\s+1$`).MatchString(out) || strings.Contains(out, "progress") {
		t.Fatalf("dq shards: %q, %v", out, err)
	}
	out, _, err = runDQ(t, env, "shards", "-o", "json")
	var m client.ShardMap
	if err != nil || json.Unmarshal([]byte(out), &m) != nil || m != (client.ShardMap{Count: 16, Previous: 16, State: "stable", Epoch: 1}) {
		t.Fatalf("dq shards -o json: %q, %v", out, err)
	}

	out, _, err = runDQ(t, env, "shards", "grow", "64")
	if err != nil || !strings.Contains(out, "growing from 16 to 64 shards (epoch 2)") || !regexp.MustCompile(`(?m)^state:\s+migrating$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^progress:\s+0\.0%$`).MatchString(out) || !regexp.MustCompile(`(?m)^remaining:\s+20000$`).MatchString(out) {
		t.Fatalf("dq shards grow 64: %q, %v", out, err)
	}
	if got, _ := f.snapshot(); got.Count != 64 || got.State != "migrating" {
		t.Fatalf("the fake after dq shards grow 64: %+v", got)
	}
	// Each read moves 7000 of 20000: 35%, then 70%.
	out, _, err = runDQ(t, env, "shards", "--addr", strings.TrimPrefix(base, "http://"))
	if err != nil || !regexp.MustCompile(`(?m)^progress:\s+35\.0%$`).MatchString(out) || !regexp.MustCompile(`(?m)^moved:\s+7000$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^previous:\s+16$`).MatchString(out) {
		t.Fatalf("dq shards while migrating: %q, %v", out, err)
	}

	_, _, err = runDQ(t, env, "shards", "grow", "128")
	if code, stderr := exitOf(t, err); !errors.Is(err, client.ErrConflict) || code == 0 || !strings.Contains(stderr, "409") ||
		!strings.Contains(stderr, "a migration from 16 to 64 shards is running") {
		t.Fatalf("dq shards grow while migrating: %v, exit %d, stderr %q", err, code, stderr)
	}
	out, _, err = runDQ(t, env, "shards", "-o", "json")
	if err != nil || json.Unmarshal([]byte(out), &m) != nil || m.State != "migrating" || m.Moved != 14000 || m.Remaining != 6000 {
		t.Fatalf("dq shards -o json while migrating: %q, %v", out, err)
	}
	if out, _, err = runDQ(t, env, "shards"); err != nil || !regexp.MustCompile(`(?m)^state:\s+stable$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^remaining:\s+0$`).MatchString(out) || strings.Contains(out, "progress") {
		t.Fatalf("dq shards once stable: %q, %v", out, err)
	}

	for _, tc := range []struct {
		n, why string
	}{{"64", "count 64: must be above the current 64"}, {"100", "count 100: must be a multiple of the current 64"}, {"8192", "count 8192: at most 4096"}} {
		_, _, err := runDQ(t, env, "shards", "grow", tc.n)
		var ae *client.APIError
		code, stderr := exitOf(t, err)
		if !errors.As(err, &ae) || ae.Status != 422 || ae.Code != "invalid_shard_count" || code == 0 || !strings.Contains(stderr, tc.why) {
			t.Errorf("dq shards grow %s: %v, exit %d, stderr %q; want 422 saying %q", tc.n, err, code, stderr, tc.why)
		}
	}
	if _, _, err := runDQ(t, env, "shards", "grow", "lots"); err == nil || !strings.Contains(err.Error(), `"lots" is not a shard count`) {
		t.Errorf("dq shards grow lots: %v", err)
	}
	if _, _, err := runDQ(t, env, "shards", "grow"); err == nil || !strings.Contains(err.Error(), "exactly one shard count") {
		t.Errorf("dq shards grow without N: %v", err)
	}
	if _, _, err := runDQ(t, env, "shards", "shrink", "8"); err == nil {
		t.Errorf("dq shards shrink: no error")
	}
	// grow 64, the 409 and the three 422s; the commands dq refuses itself
	// send nothing.
	if _, gets := f.snapshot(); gets != 5 || f.putCount() != 5 {
		t.Errorf("the fake saw %d GETs and %d PUTs, want 5 and 5", gets, f.putCount())
	}

	_, _, err = runDQ(t, env, "shards", "grow", "128", "--token", "wrong")
	if code, stderr := exitOf(t, err); code == 0 || !strings.Contains(stderr, "401") || !strings.Contains(stderr, "missing or wrong bearer token") {
		t.Errorf("dq shards grow with a wrong token: %v, exit %d, stderr %q", err, code, stderr)
	}
	f.set(func(f *shardsFake) { f.noEtcd = true })
	for _, args := range [][]string{{"shards"}, {"shards", "grow", "128"}} {
		_, _, err := runDQ(t, env, args...)
		if code, stderr := exitOf(t, err); code == 0 || !strings.Contains(stderr, "503 unavailable") || !strings.Contains(stderr, "no etcd is configured") {
			t.Errorf("dq %s without etcd: %v, exit %d, stderr %q", strings.Join(args, " "), err, code, stderr)
		}
	}
	if got, _ := f.snapshot(); got.Count != 64 || got.Epoch != 2 {
		t.Errorf("a refused growth changed the map: %+v", got)
	}
}

// TestShardsGrowWait: dq shards grow N --wait polls until the map is
// stable at N, printing the progress as it rises; a first read that still
// shows the old stable map and a 503 in between do not end the wait. With
// -o json the final map is the output.
func TestShardsGrowWait(t *testing.T) {
	f, base := newShardsFake(t, 16)
	f.set(func(f *shardsFake) { f.staleReads, f.fail[2] = 1, true })
	env := map[string]string{"DQ_ADDR": base, "DQ_API_TOKEN": "tok"}

	out, stderr, err := runDQ(t, env, "shards", "grow", "64", "--wait")
	got, gets := f.snapshot()
	if err != nil || got.State != "stable" || got.Count != 64 {
		t.Fatalf("dq shards grow 64 --wait: %v; the fake's map %+v; stdout %q, stderr %q", err, got, out, stderr)
	}
	// stale, 503, 35%, 70%, 100%
	if gets != 5 {
		t.Errorf("%d reads, want 5", gets)
	}
	if want := "growing from 16 to 64 shards (epoch 2)\ndone: 64 shards, stable (epoch 2), 20000 tasks moved\n"; out != want {
		t.Errorf("stdout %q, want %q", out, want)
	}
	want := []string{
		"migrating 16 → 64 shards: 0.0% (0 moved, 20000 remaining)",
		"reading the shard map: delayq: 503 unavailable: etcd is not reachable (retrying)",
		"migrating 16 → 64 shards: 35.0% (7000 moved, 13000 remaining)",
		"migrating 16 → 64 shards: 70.0% (14000 moved, 6000 remaining)",
	}
	if lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n"); strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("progress on stderr:\n%s\nwant:\n%s", stderr, strings.Join(want, "\n"))
	}

	f.set(func(f *shardsFake) { f.step = 15000 })
	out, _, err = runDQ(t, env, "shards", "grow", "128", "--wait", "-o", "json")
	var m client.ShardMap
	if err != nil || json.Unmarshal([]byte(out), &m) != nil || m != (client.ShardMap{Count: 128, Previous: 64, State: "stable", Moved: 20000, Epoch: 3}) {
		t.Fatalf("dq shards grow 128 --wait -o json: %q, %v", out, err)
	}
	// A refused growth ends --wait before any polling.
	_, _, err = runDQ(t, env, "shards", "grow", "100", "--wait")
	if _, after := f.snapshot(); !strings.Contains(fmt.Sprint(err), "invalid_shard_count") || after != 7 {
		t.Errorf("dq shards grow 100 --wait: %v after %d reads, want 422 and no more reads than 7", err, after)
	}
}

// TestShardsWaitEnds: the wait ends at once on a 4xx, after
// shardsMaxFailures failed reads in a row, after shardsMaxStale reads of a
// stable map below the target, and when its context ends.
func TestShardsWaitEnds(t *testing.T) {
	f, base := newShardsFake(t, 16)
	c := client.New(base, client.WithToken("tok"))
	m, err := c.GrowShards(t.Context(), 32)
	if err != nil {
		t.Fatal(err)
	}

	f.set(func(f *shardsFake) { f.token = "rotated" })
	_, err = waitShards(t.Context(), c, m, 32, io.Discard, time.Millisecond)
	var ae *client.APIError
	if _, gets := f.snapshot(); !errors.As(err, &ae) || ae.Status != 401 || gets != 0 {
		t.Errorf("wait with a refused token: %v after %d GETs, want 401 at the first read", err, gets)
	}

	f.set(func(f *shardsFake) {
		f.token = "tok"
		for i := 1; i <= 100; i++ {
			f.fail[i] = true
		}
	})
	_, err = waitShards(t.Context(), c, m, 32, io.Discard, time.Millisecond)
	if _, gets := f.snapshot(); !errors.As(err, &ae) || ae.Status != 503 || !strings.Contains(err.Error(), strconv.Itoa(shardsMaxFailures)+" reads of the shard map failed in a row") || gets != shardsMaxFailures {
		t.Errorf("wait with etcd gone: %v after %d GETs, want %d", err, gets, shardsMaxFailures)
	}

	f.set(func(f *shardsFake) { f.fail, f.gets, f.staleReads = map[int]bool{}, 0, 1000 })
	_, err = waitShards(t.Context(), c, m, 32, io.Discard, time.Millisecond)
	if _, gets := f.snapshot(); err == nil || !strings.Contains(err.Error(), "still reports a stable map of 16 shards, not 32") || gets != shardsMaxStale {
		t.Errorf("wait on a map that never shows the growth: %v after %d GETs, want %d", err, gets, shardsMaxStale)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err = waitShards(ctx, c, m, 32, io.Discard, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("wait with its context ended: %v", err)
	}
	// A growth answered stable at the target (nothing to move) ends the
	// wait without a read.
	f.set(func(f *shardsFake) { f.gets = 0 })
	done := client.ShardMap{Count: 32, Previous: 16, State: "stable", Moved: 20000, Epoch: 2}
	if got, err := waitShards(t.Context(), c, &done, 32, io.Discard, time.Hour); err != nil || *got != done {
		t.Errorf("wait from a stable answer: %+v, %v", got, err)
	}
	if _, gets := f.snapshot(); gets != 0 {
		t.Errorf("wait from a stable answer read the map %d times", gets)
	}
}

// TestShardsHelp: dq shards -h and dq shards grow -h print the usage with
// both forms and the rules of N, and end in ErrHelp (exit 0).
func TestShardsHelp(t *testing.T) {
	for _, args := range [][]string{{"shards", "-h"}, {"shards", "grow", "-h"}, {"shards", "help"}} {
		_, stderr, err := runDQ(t, nil, args...)
		if !errors.Is(err, ErrHelp) || !strings.Contains(stderr, "dq shards grow N [--wait]") || !strings.Contains(stderr, "multiple of the current count") ||
			!strings.Contains(stderr, "-addr") {
			t.Errorf("dq %s: %v, %q", strings.Join(args, " "), err, stderr)
		}
	}
}

// TestGrowLine: a growth without figures yet says "starting", not
// "0.0% (0 moved, 0 remaining)"; with figures, the percentage.
func TestGrowLine(t *testing.T) {
	for _, tc := range []struct {
		m    client.ShardMap
		want string
	}{
		{client.ShardMap{Previous: 16, Count: 64, State: "migrating"}, "migrating 16 → 64 shards: starting"},
		{client.ShardMap{Previous: 16, Count: 64, State: "migrating", Remaining: 200}, "migrating 16 → 64 shards: 0.0% (0 moved, 200 remaining)"},
		{client.ShardMap{Previous: 16, Count: 64, State: "migrating", Moved: 50, Remaining: 150}, "migrating 16 → 64 shards: 25.0% (50 moved, 150 remaining)"},
	} {
		if got := growLine(&tc.m); got != tc.want {
			t.Errorf("growLine(%+v) = %q, want %q", tc.m, got, tc.want)
		}
	}
}
