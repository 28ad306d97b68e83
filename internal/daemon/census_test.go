package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq/api"
	"github.com/delayq/delayq/client"
)

// The census endpoints through the daemon: GET /v1/counts, /v1/load,
// /v1/history and /v1/search, their validation, their answer while Redis
// is down, and the counts' cache and the gauge sampler on their own.

func TestCensusEndpoints(t *testing.T) {
	r := startRedis(t)
	cfg := testConfig(t, r.Addr)
	cfg.Shards = 4
	cfg.APIToken = "census-token"
	app := startApp(t, cfg)
	for i := range 12 {
		typ := "mail.send"
		if i%4 == 0 {
			typ = "sms.send"
		}
		body := fmt.Sprintf(`{"id":"cen*[%d","type":%q,"delay":"%ds"}`, i, typ, 30+60*(i%4))
		if rp := app.do("POST", "/v1/tasks", body); rp.Status != 201 {
			t.Fatalf("schedule: %d %s", rp.Status, rp.Raw)
		}
	}
	if rp := app.do("POST", "/v1/tasks", `{"id":"other","type":"mail.send","delay":"2h"}`); rp.Status != 201 {
		t.Fatalf("schedule: %d %s", rp.Status, rp.Raw)
	}

	rp := app.do("GET", "/v1/counts", "")
	var counts api.Counts
	strictRoundTrip(t, rp.Raw, &counts)
	if rp.Status != 200 || counts.Sampled || len(counts.Types) != 2 || counts.Types[0].Type != "mail.send" ||
		counts.Types[0].Scheduled != 10 || counts.Types[1].Scheduled != 3 || counts.Totals.Scheduled != 13 || counts.At.IsZero() {
		t.Fatalf("counts: %d %s", rp.Status, rp.Raw)
	}

	rp = app.do("GET", "/v1/load?horizon=4m&step=1m", "")
	var load api.Load
	strictRoundTrip(t, rp.Raw, &load)
	if rp.Status != 200 || len(load.Buckets) != 4 || load.Step.D() != time.Minute || load.Horizon.D() != 4*time.Minute || load.Overdue != 0 {
		t.Fatalf("load: %d %s", rp.Status, rp.Raw)
	}
	for i, b := range load.Buckets {
		if b.Count != 3 || !b.Start.Equal(load.From.Add(time.Duration(i)*time.Minute)) {
			t.Fatalf("load bucket %d: %+v (%s)", i, b, rp.Raw)
		}
	}
	if len(load.Types) != 2 || load.Types[1].Type != "sms.send" || load.Types[1].Counts[0] != 3 {
		t.Fatalf("load types: %s", rp.Raw)
	}

	rp = app.do("GET", "/v1/history?window=10m&step=1m", "")
	var hist api.History
	strictRoundTrip(t, rp.Raw, &hist)
	if rp.Status != 200 || len(hist.Points) != 10 || hist.Window.D() != 10*time.Minute {
		t.Fatalf("history: %d %s", rp.Status, rp.Raw)
	}
	// the sampler takes a sample when the daemon starts
	waitFor(t, "a gauge sample", func() bool {
		var h api.History
		strictRoundTrip(t, app.do("GET", "/v1/history", "").Raw, &h)
		return len(h.Gauges) > 0 && h.Gauges[0].Scheduled >= 0 && !h.Gauges[0].At.IsZero()
	})

	var found []string
	cursor := ""
	for page := 0; ; page++ {
		if page > 100 {
			t.Fatal("search does not end")
		}
		rp = app.do("GET", "/v1/search?limit=5&prefix="+url.QueryEscape("cen*[")+"&cursor="+url.QueryEscape(cursor), "")
		if rp.Status != 200 {
			t.Fatalf("search: %d %s", rp.Status, rp.Raw)
		}
		tasks, _ := rp.JSON["tasks"].([]any)
		for _, x := range tasks {
			m, _ := x.(map[string]any)
			id, _ := m["id"].(string)
			found = append(found, id)
			if m["state"] != "scheduled" {
				t.Fatalf("search: %s", rp.Raw)
			}
		}
		if cursor = rp.str("cursor"); cursor == "" {
			break
		}
	}
	if len(found) != 12 {
		t.Fatalf("search found %v", found)
	}
	rp = app.do("GET", "/v1/search?prefix=zzz", "")
	if rp.Status != 200 || string(rp.Raw) != "{\"tasks\":[],\"cursor\":\"\",\"scanned\":13}\n" {
		t.Fatalf("search zzz: %d %s", rp.Status, rp.Raw)
	}

	// a cap below the members: sampled, totals still the sets' sizes
	app.census.capPerSet.Store(2)
	app.census.mu.Lock()
	app.census.val = nil // the cache
	app.census.mu.Unlock()
	strictRoundTrip(t, app.do("GET", "/v1/counts", "").Raw, &counts)
	if !counts.Sampled || counts.Totals.Scheduled != 13 || counts.Scanned > 4*2 {
		t.Fatalf("sampled counts: %+v", counts)
	}
	strictRoundTrip(t, app.do("GET", "/v1/load?horizon=4m&step=1m&type=sms.send", "").Raw, &load)
	if !load.Sampled || len(load.Types) > 1 || load.Buckets[0].Count != 3 {
		t.Fatalf("sampled load: %+v", load)
	}

	censusValidation(t, app)

	// no token: 401; Redis down: 503, never a 4xx
	for _, p := range []string{"/v1/counts", "/v1/load", "/v1/history", "/v1/search?prefix=a"} {
		if rp := app.doHeader("GET", p, "", http.Header{}); rp.Status != 401 {
			t.Fatalf("%s without a token: %d", p, rp.Status)
		}
	}
	r.Kill(t)
	for _, p := range []string{"/v1/counts", "/v1/load", "/v1/history", "/v1/search?prefix=a"} {
		waitFor(t, p+" answering 503", func() bool {
			rp := app.do("GET", p, "")
			if rp.Status != 503 && rp.Status != 200 {
				t.Fatalf("%s with Redis down: %d %s", p, rp.Status, rp.Raw)
			}
			return rp.Status == 503 && rp.errCode() == "unavailable"
		})
	}
}

// censusValidation: every bad parameter is a 4xx naming it.
func censusValidation(t *testing.T, app *testApp) {
	t.Helper()
	long := strings.Repeat("a", 201)
	for _, c := range []struct {
		path   string
		status int
		field  string
	}{
		{"/v1/counts?x=1", 400, `"x"`},
		{"/v1/load?horizon=soon", 422, "horizon:"},
		{"/v1/load?horizon=0s", 422, "horizon:"},
		{"/v1/load?horizon=169h", 422, "horizon:"},
		{"/v1/load?step=500ms", 422, "step:"},
		{"/v1/load?horizon=1h&step=2h", 422, "step:"},
		{"/v1/load?horizon=168h&step=1m", 422, "step:"},
		{"/v1/load?type=", 422, "type:"},
		{"/v1/load?horizon=1h&horizon=2h", 422, "horizon:"},
		{"/v1/load?window=1h", 400, `"window"`},
		{"/v1/history?window=25h", 422, "window:"},
		{"/v1/history?window=-1h", 422, "window:"},
		{"/v1/history?step=0", 422, "step:"},
		{"/v1/history?window=24h&step=1m", 422, "step:"},
		{"/v1/history?horizon=1h", 400, `"horizon"`},
		{"/v1/search", 422, "prefix:"},
		{"/v1/search?prefix=", 422, "prefix:"},
		{"/v1/search?prefix=" + long, 422, "prefix:"},
		{"/v1/search?prefix=a&limit=0", 422, "limit:"},
		{"/v1/search?prefix=a&limit=1001", 422, "limit:"},
		{"/v1/search?prefix=a&cursor=nope", 422, "cursor:"},
		{"/v1/search?prefix=a&cursor=" + strings.Repeat("c", 4097), 422, "cursor:"},
		{"/v1/search?prefix=%ff", 422, "prefix:"},
		{"/v1/search?prefix=a&state=dead", 400, `"state"`},
	} {
		rp := app.do("GET", c.path, "")
		if rp.Status != c.status || !strings.Contains(rp.errMessage(), c.field) {
			t.Errorf("%.60s: %d %s, want %d naming %s", c.path, rp.Status, rp.Raw, c.status, c.field)
		}
	}
	// a cursor of another prefix
	rp := app.do("GET", "/v1/search?limit=1&prefix=cen", "")
	if cur := rp.str("cursor"); rp.Status != 200 || cur == "" {
		t.Fatalf("search cen: %d %s", rp.Status, rp.Raw)
	} else if rp := app.do("GET", "/v1/search?prefix=other&cursor="+url.QueryEscape(cur), ""); rp.Status != 422 || !strings.HasPrefix(rp.errMessage(), "cursor:") {
		t.Fatalf("a cursor of another prefix: %d %s", rp.Status, rp.Raw)
	}
}

// TestCountsCache: callers within countsTTL share one scan; callers that
// arrive during a scan wait for it; a failed scan is not cached.
func TestCountsCache(t *testing.T) {
	cn := newCensus()
	var scans atomic.Int32
	release := make(chan struct{})
	scan := func(ctx context.Context) (*api.Counts, error) {
		scans.Add(1)
		<-release
		return &api.Counts{Scanned: 7}, nil
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			v, err := cn.counts(t.Context(), scan)
			if err != nil || v.Scanned != 7 {
				t.Errorf("counts: %+v %v", v, err)
			}
		})
	}
	waitFor(t, "a scan to start", func() bool { return scans.Load() == 1 })
	close(release)
	wg.Wait()
	if v, err := cn.counts(t.Context(), scan); err != nil || v.Scanned != 7 || scans.Load() != 1 {
		t.Fatalf("cached: %+v %v, %d scans", v, err, scans.Load())
	}
	cn.mu.Lock()
	cn.at = time.Now().Add(-countsTTL)
	cn.mu.Unlock()
	boom := errors.New("boom")
	if _, err := cn.counts(t.Context(), func(context.Context) (*api.Counts, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("failed scan: %v", err)
	}
	if v, err := cn.counts(t.Context(), scan); err != nil || scans.Load() != 2 || v.Scanned != 7 {
		t.Fatalf("after a failed scan: %+v %v, %d scans", v, err, scans.Load())
	}
}

// TestGaugeSampler: with a short interval the ring fills, keeps only the
// last samples, oldest first, and since filters by time.
func TestGaugeSampler(t *testing.T) {
	g := newGaugeSampler(time.Millisecond, 5)
	var n atomic.Int64
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.run(ctx, func(context.Context) (api.Gauge, bool) {
			i := n.Add(1)
			if i%4 == 0 {
				return api.Gauge{}, false // Redis down: no sample
			}
			return api.Gauge{At: api.Time{Time: time.UnixMilli(i)}, Scheduled: i}, true
		})
	}()
	waitFor(t, "12 samples", func() bool { return n.Load() >= 12 })
	cancel()
	<-done
	got := g.since(time.Time{})
	if len(got) != 5 {
		t.Fatalf("%d samples kept, want 5", len(got))
	}
	for i := 1; i < len(got); i++ {
		if got[i].Scheduled <= got[i-1].Scheduled || got[i].Scheduled%4 == 0 {
			t.Fatalf("samples %+v", got)
		}
	}
	if last := got[len(got)-1].Scheduled; last < n.Load()-1 {
		t.Fatalf("last sample %d of %d", last, n.Load())
	}
	if s := g.since(time.UnixMilli(got[3].Scheduled)); len(s) != 2 {
		t.Fatalf("since: %+v", s)
	}
	if s := newGaugeSampler(time.Second, 3).since(time.Time{}); s == nil || len(s) != 0 {
		t.Fatalf("empty ring: %#v", s)
	}
}

// TestCensusClient: the Go client's census methods against the daemon.
func TestCensusClient(t *testing.T) {
	r := startRedis(t)
	cfg := testConfig(t, r.Addr)
	cfg.Shards = 4
	app := startApp(t, cfg)
	c := client.New(app.base, client.WithHTTPClient(&http.Client{Timeout: 10 * time.Second}))
	ctx := t.Context()
	for i := range 30 {
		body := fmt.Sprintf(`{"id":"cl?%d","type":"t.%d","delay":"90s"}`, i, i%2)
		if rp := app.do("POST", "/v1/tasks", body); rp.Status != 201 {
			t.Fatalf("schedule: %d %s", rp.Status, rp.Raw)
		}
	}
	counts, err := c.Counts(ctx)
	if err != nil || len(counts.Types) != 2 || counts.Types[0].Type != "t.0" || counts.Types[0].Scheduled != 15 || counts.Totals.Scheduled != 30 {
		t.Fatalf("counts: %+v %v", counts, err)
	}
	load, err := c.Load(ctx, client.LoadOptions{Horizon: 10 * time.Minute, Step: time.Minute, Type: "t.1"})
	if err != nil || len(load.Buckets) != 10 || load.Buckets[1].Count != 30 || len(load.Types) != 1 || load.Types[0].Counts[1] != 15 {
		t.Fatalf("load: %+v %v", load, err)
	}
	hist, err := c.History(ctx, 0, 0)
	if err != nil || len(hist.Points) != 60 || hist.Step.D() != time.Minute {
		t.Fatalf("history: %+v %v", hist, err)
	}
	n := 0
	for tk, err := range c.Search(ctx, "cl?1") { // cl?1, cl?10..cl?19
		if err != nil || !strings.HasPrefix(tk.ID, "cl?1") || tk.State != client.StateScheduled {
			t.Fatalf("search: %+v %v", tk, err)
		}
		n++
	}
	if n != 11 {
		t.Fatalf("search found %d", n)
	}
	var ae *client.APIError
	if _, err := c.SearchTasks(ctx, "cl", 2000, ""); !errors.As(err, &ae) || ae.Status != 422 {
		t.Fatalf("limit 2000: %v", err)
	}
	if _, err := c.Load(ctx, client.LoadOptions{Step: time.Millisecond}); !errors.As(err, &ae) || ae.Status != 422 {
		t.Fatalf("step 1ms: %v", err)
	}
}
