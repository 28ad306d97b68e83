package client_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/delayq/delayq/client"
)

// shardsFake implements the daemon's /v1/shards contract (GET and PUT
// with their error answers) over an in-memory map. The daemon's endpoint
// is built alongside this client; the end-to-end test against the real
// daemon lives with it. Each GET of a migrating map moves step tasks, so
// a migration advances with the polls, not with the clock.
type shardsFake struct {
	mu       sync.Mutex
	token    string
	noEtcd   bool
	pending  int64 // tasks a growth has to move
	step     int64 // tasks moved per GET while migrating
	m        client.ShardMap
	putBody  string // the last PUT's body and Content-Type, as sent
	putCType string
}

func newShardsFake(t *testing.T, token string, count int) (*shardsFake, string) {
	t.Helper()
	f := &shardsFake{token: token, pending: 20000, step: 7000,
		m: client.ShardMap{Count: count, Previous: count, State: client.ShardsStable, Epoch: 1}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func writeAPIError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": msg}})
	_, _ = w.Write(b)
}

func (f *shardsFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.URL.Path != "/v1/shards" {
		writeAPIError(w, http.StatusNotFound, "not_found", "no route "+r.URL.Path)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+f.token {
		writeAPIError(w, http.StatusUnauthorized, "unauthorized", "missing or wrong bearer token")
		return
	}
	if f.noEtcd {
		writeAPIError(w, http.StatusServiceUnavailable, "unavailable", "the shard map lives in etcd, and no etcd is configured")
		return
	}
	status := http.StatusOK
	switch r.Method {
	case http.MethodGet:
		if f.m.State == client.ShardsMigrating {
			n := min(f.step, f.m.Remaining)
			f.m.Moved += n
			f.m.Remaining -= n
			if f.m.Remaining == 0 {
				f.m.State = client.ShardsStable
			}
		}
	case http.MethodPut:
		b, _ := io.ReadAll(r.Body)
		f.putBody, f.putCType = string(b), r.Header.Get("Content-Type")
		var req struct {
			Count *int `json:"count"`
		}
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil || req.Count == nil {
			writeAPIError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("want {\"count\": N}: %v", err))
			return
		}
		n := *req.Count
		switch {
		case f.m.State == client.ShardsMigrating:
			writeAPIError(w, http.StatusConflict, "conflict", fmt.Sprintf("a migration from %d to %d shards is running", f.m.Previous, f.m.Count))
			return
		case n <= f.m.Count:
			writeAPIError(w, http.StatusUnprocessableEntity, "invalid_shard_count", fmt.Sprintf("count %d: must be above the current %d", n, f.m.Count))
			return
		case n > 4096:
			writeAPIError(w, http.StatusUnprocessableEntity, "invalid_shard_count", fmt.Sprintf("count %d: at most 4096", n))
			return
		case n%f.m.Count != 0:
			writeAPIError(w, http.StatusUnprocessableEntity, "invalid_shard_count", fmt.Sprintf("count %d: must be a multiple of the current %d", n, f.m.Count))
			return
		}
		f.m = client.ShardMap{Count: n, Previous: f.m.Count, State: client.ShardsMigrating, Remaining: f.pending, Epoch: f.m.Epoch + 1}
		status = http.StatusAccepted
	default:
		writeAPIError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(f.m)
}

// TestShardsGrowAndPoll: a growth is accepted once, refused while it runs,
// its progress only goes up until the map is stable at the new count, and
// the refusals of a bad count come back as 422 invalid_shard_count naming
// the field.
func TestShardsGrowAndPoll(t *testing.T) {
	f, url := newShardsFake(t, "tok", 16)
	ctx := t.Context()
	c := client.New(url, client.WithToken("tok"))

	m, err := c.Shards(ctx)
	if err != nil || *m != (client.ShardMap{Count: 16, Previous: 16, State: "stable", Epoch: 1}) || m.Migrating() || m.Progress() != 1 {
		t.Fatalf("Shards before growing: %+v, %v", m, err)
	}
	m, err = c.GrowShards(ctx, 64)
	if err != nil || m.Count != 64 || m.Previous != 16 || !m.Migrating() || m.Moved != 0 || m.Remaining != 20000 || m.Epoch != 2 || m.Progress() != 0 {
		t.Fatalf("GrowShards(64): %+v, %v", m, err)
	}
	if f.putBody != `{"count":64}` || f.putCType != "application/json" {
		t.Errorf("PUT sent %q with Content-Type %q, want {\"count\":64} as application/json", f.putBody, f.putCType)
	}

	_, err = c.GrowShards(ctx, 128)
	var ae *client.APIError
	if !errors.Is(err, client.ErrConflict) || !errors.As(err, &ae) || ae.Status != http.StatusConflict || !strings.Contains(ae.Message, "running") {
		t.Fatalf("GrowShards while migrating: %v, want 409 conflict", err)
	}

	last, polls := 0.0, 0
	for {
		polls++
		if polls > 10 {
			t.Fatalf("still migrating after %d polls: %+v", polls, m)
		}
		if m, err = c.Shards(ctx); err != nil {
			t.Fatal(err)
		}
		if m.Count != 64 || m.Previous != 16 || m.Epoch != 2 || m.Moved+m.Remaining != 20000 || m.Progress() <= last {
			t.Fatalf("poll %d: %+v (progress %v after %v)", polls, m, m.Progress(), last)
		}
		last = m.Progress()
		if !m.Migrating() {
			break
		}
	}
	if polls != 3 || m.State != "stable" || m.Moved != 20000 || m.Remaining != 0 || m.Progress() != 1 {
		t.Fatalf("after %d polls: %+v, want stable with 20000 moved after 3", polls, m)
	}

	for _, tc := range []struct {
		count int
		why   string
	}{{64, "above the current"}, {32, "above the current"}, {100, "multiple"}, {8192, "4096"}, {0, "above the current"}} {
		_, err := c.GrowShards(ctx, tc.count)
		if !errors.As(err, &ae) || ae.Status != http.StatusUnprocessableEntity || ae.Code != "invalid_shard_count" ||
			!strings.Contains(ae.Message, "count") || !strings.Contains(ae.Message, tc.why) || errors.Is(err, client.ErrConflict) {
			t.Errorf("GrowShards(%d): %v, want 422 invalid_shard_count saying %q", tc.count, err, tc.why)
		}
	}
	if m, err = c.GrowShards(ctx, 128); err != nil || m.Previous != 64 || m.Count != 128 || m.Epoch != 3 {
		t.Fatalf("GrowShards(128) once stable: %+v, %v", m, err)
	}
}

// TestShardsErrors: a wrong token is 401 unauthorized, a daemon without
// etcd answers 503 unavailable, on both calls, and no map comes back.
func TestShardsErrors(t *testing.T) {
	f, url := newShardsFake(t, "tok", 4)
	ctx := t.Context()
	var ae *client.APIError
	bad := client.New(url, client.WithToken("wrong"))
	if m, err := bad.Shards(ctx); m != nil || !errors.As(err, &ae) || ae.Status != 401 || ae.Code != "unauthorized" {
		t.Errorf("Shards with a wrong token: %+v, %v", m, err)
	}
	if m, err := bad.GrowShards(ctx, 8); m != nil || !errors.As(err, &ae) || ae.Status != 401 || ae.Code != "unauthorized" {
		t.Errorf("GrowShards with a wrong token: %+v, %v", m, err)
	}
	f.mu.Lock()
	f.noEtcd = true
	f.mu.Unlock()
	c := client.New(url, client.WithToken("tok"))
	if m, err := c.Shards(ctx); m != nil || !errors.As(err, &ae) || ae.Status != 503 || ae.Code != "unavailable" || !strings.Contains(err.Error(), "etcd") {
		t.Errorf("Shards without etcd: %+v, %v", m, err)
	}
	if m, err := c.GrowShards(ctx, 8); m != nil || !errors.As(err, &ae) || ae.Status != 503 || ae.Code != "unavailable" {
		t.Errorf("GrowShards without etcd: %+v, %v", m, err)
	}
}

// TestShardMapDecodeAndProgress: the contract's example body decodes into
// every field, and Progress is moved / (moved + remaining) while
// migrating, 1 when stable.
func TestShardMapDecodeAndProgress(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"count": 64, "previous": 16, "state": "migrating", "moved": 1200, "remaining": 18800, "epoch": 3}`)
	}))
	defer srv.Close()
	m, err := client.New(srv.URL).Shards(t.Context())
	want := client.ShardMap{Count: 64, Previous: 16, State: "migrating", Moved: 1200, Remaining: 18800, Epoch: 3}
	if err != nil || *m != want {
		t.Fatalf("decoded %+v, %v; want %+v", m, err, want)
	}
	for _, tc := range []struct {
		m    client.ShardMap
		want float64
	}{
		{want, 0.06},
		{client.ShardMap{State: "migrating"}, 0},
		{client.ShardMap{State: "migrating", Moved: 5}, 1},
		{client.ShardMap{State: "stable", Moved: 20000}, 1},
		{client.ShardMap{State: "stable", Count: 16, Previous: 16}, 1},
	} {
		if got := tc.m.Progress(); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%+v.Progress() = %v, want %v", tc.m, got, tc.want)
		}
	}
}
