package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
)

// TestMountReport: /readyz is 200 or 503 as the report says, and its body
// has every check on a line of its own (ready or not) and the failing
// ones, joined, as the reason Mount's body has.
func TestMountReport(t *testing.T) {
	for _, c := range []struct {
		ready  bool
		checks []Check
		code   int
		body   ReadyBody
	}{
		{true, []Check{{"redis", true, "ok"}, {"journal", true, "ok"}}, 200,
			ReadyBody{Status: "ready", Checks: []string{"redis: ok", "journal: ok"}}},
		{true, []Check{{"redis", false, "degraded: unreachable"}, {"journal", true, "ok"}}, 200,
			ReadyBody{Status: "ready", Reason: "redis: degraded: unreachable", Checks: []string{"redis: degraded: unreachable", "journal: ok"}}},
		{false, []Check{{"redis", false, "degraded:\nunreachable"}, {"journal", false, "failing"}}, 503,
			ReadyBody{Status: "not ready", Reason: "redis: degraded: unreachable\njournal: failing", Checks: []string{"redis: degraded: unreachable", "journal: failing"}}},
	} {
		mux := http.NewServeMux()
		MountReport(mux, NewRegistry(), func(context.Context) (bool, []Check) { return c.ready, c.checks })
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		var got ReadyBody
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != c.code || !reflect.DeepEqual(got, c.body) {
			t.Errorf("%d %s, want %d %+v (%v)", rec.Code, rec.Body, c.code, c.body, err)
		}
		for _, p := range []string{"/healthz", "/metrics"} {
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest("GET", p, nil))
			if rec.Code != 200 {
				t.Errorf("%s: %d", p, rec.Code)
			}
		}
	}
}
