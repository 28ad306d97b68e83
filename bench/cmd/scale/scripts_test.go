package main

import (
	"io"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/bench/internal/tbenv"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// -redis-scripts on a real redis-server: a window counts the store's
// scripts by name and another script by its SHA1's prefix, nothing from
// before the window, and puts the server's threshold back.
func TestSlowlogScripts(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	scope := tbenv.New("scripts", io.Discard)
	defer scope.Close()
	e := &env{scope: scope, nodes: []*redis.Client{rdb}}
	st, err := redisstore.New(t.Context(), rdb, redisstore.Options{Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	schedule := func(id string) {
		t.Helper()
		if _, err := st.Schedule(t.Context(), []redisstore.Submit{{Task: &task.Task{ID: id, Type: "t"}, Delay: time.Hour, Relative: true}}); err != nil {
			t.Fatal(err)
		}
	}
	schedule("before") // not in the window
	other := redis.NewScript("return 1")
	was := e.slowlogOn()
	schedule("a")
	schedule("b")
	if err := other.Run(t.Context(), rdb, nil).Err(); err != nil {
		t.Fatal(err)
	}
	ss := e.slowlogOff(was)
	got := map[string]int{}
	for _, s := range ss {
		got[s.name] = s.calls
		// SLOWLOG's durations are whole microseconds: "return 1" can take
		// 0 on a fast server (CI's did), the schedule script's commands
		// cannot.
		if s.wall < 0 || s.name == "schedule" && s.wall <= 0 {
			t.Errorf("%s: wall %v", s.name, s.wall)
		}
	}
	if got["schedule"] != 2 || got[other.Hash()[:8]] != 1 || len(got) != 2 {
		t.Errorf("scripts counted %v, want schedule 2 and %s 1", got, other.Hash()[:8])
	}
	if v := rdb.ConfigGet(t.Context(), "slowlog-log-slower-than").Val()["slowlog-log-slower-than"]; v != was[0] {
		t.Errorf("slowlog-log-slower-than %s after the window, want %s back", v, was[0])
	}
}
