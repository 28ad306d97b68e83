package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/testenv/tmpfs"
)

// TestReadyzJournalDiskFull (issue 40, item 7): Redis down and the
// journal's disk full. Every schedule was refused (503) while /readyz
// stayed 200 "journal: ok": the check rewrote a page bbolt had written
// before, which a full disk does not refuse. Now /readyz goes 503 naming
// the full disk (the check writes new data), and ready again once there is
// room. The journal directory is on a 1 MiB tmpfs (needs CAP_SYS_ADMIN:
// a named skip without it, a failure with DQ_REQUIRE_TMPFS set).
func TestReadyzJournalDiskFull(t *testing.T) {
	mnt := tmpfs.Mount(t, 1<<20)
	r := startRedis(t)
	cfg := testConfig(t, r.Addr)
	cfg.JournalDir = filepath.Join(mnt, "journal")
	app := startApp(t, cfg)
	if code, b := app.readyz(); code != 200 || !strings.HasPrefix(strings.Join(b.Checks, "\n"), "redis: ok\njournal: ok") {
		t.Fatalf("all well: %d %+v", code, b)
	}
	r.Stop(t)
	testenv.WaitFor(t, 10*time.Second, "redis seen down", func() bool { return !app.core.redisUp.Load() })
	for _, id := range []string{"j-1", "j-2"} {
		if rp := app.do("POST", "/v1/tasks", `{"id":"`+id+`","type":"x","delay":"1h"}`); rp.Status != 202 {
			t.Fatalf("schedule %s with redis down: %d %s", id, rp.Status, rp.Raw)
		}
	}

	// The disk fills up (another file on it).
	fill := filepath.Join(mnt, "fill")
	f, err := os.Create(fill)
	if err != nil {
		t.Fatal(err)
	}
	for err == nil {
		_, err = f.Write(make([]byte, 4096))
	}
	_ = f.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the tmpfs: %v", err)
	}
	var last admin.ReadyBody
	testenv.WaitFor(t, 20*time.Second, "readyz 503 on a full journal disk", func() bool {
		code, b := app.readyz()
		last = b
		return code == 503
	})
	if !strings.Contains(last.Reason, "redis: degraded") || !strings.Contains(last.Reason, "journal: failing") ||
		!strings.Contains(last.Reason, "no space left on device") {
		t.Fatalf("readyz on a full journal disk: %+v", last)
	}
	payload := `"` + strings.Repeat("p", 256<<10) + `"`
	if rp := app.do("POST", "/v1/tasks", `{"id":"j-3","type":"x","delay":"1h","payload":`+payload+`}`); rp.Status != 503 {
		t.Fatalf("schedule with redis down and the disk full: %d %.300s", rp.Status, rp.Raw)
	}
	if code, b := app.readyz(); code != 503 || !strings.Contains(b.Reason, "journal: failing") {
		t.Fatalf("readyz right after a refused journal write: %d %+v", code, b)
	}

	// Room again: ready (Redis still down), and schedules are journaled.
	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "readyz 200 once the disk has room", func() bool {
		code, b := app.readyz()
		last = b
		return code == 200
	})
	if len(last.Checks) < 2 || !strings.HasPrefix(last.Checks[1], "journal: ok") {
		t.Fatalf("readyz with room again: %+v", last)
	}
	if rp := app.do("POST", "/v1/tasks", `{"id":"j-3","type":"x","delay":"1h","payload":`+payload+`}`); rp.Status != 202 {
		t.Fatalf("schedule with room again: %d %.300s", rp.Status, rp.Raw)
	}
	// Redis back: the journal is replayed.
	r.Restart(t)
	testenv.WaitFor(t, 20*time.Second, "journal replayed", func() bool { return app.JournalDepth() == 0 })
	for _, id := range []string{"j-1", "j-2", "j-3"} {
		if g := app.do("GET", "/v1/tasks/"+id, ""); g.Status != 200 || g.str("state") != "scheduled" {
			t.Fatalf("GET %s after the replay: %d %.300s", id, g.Status, g.Raw)
		}
	}
}
