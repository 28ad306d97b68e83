package worktest

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// Env is one test's infrastructure around a worker: a redis-server, a
// kfake broker with the given topics (consumer groups allowed to use short
// sessions), a store in a namespace of its own, and a Firer playing the
// event side.
type Env struct {
	Redis *testenv.Redis
	RDB   *redis.Client
	Kafka *testenv.Kafka
	Store *redisstore.Store
	Firer *Firer
	NS    string // the store's namespace, unique to the test
	Group string // a consumer group name unique to the test
}

// NewEnv starts an Env whose store has shards shards and whose broker
// holds topics.
func NewEnv(tb testing.TB, shards int, topics ...string) *Env {
	tb.Helper()
	e := &Env{Redis: testenv.StartRedis(tb), Kafka: testenv.StartKafka(tb, topics...)}
	FastGroups(tb, e.Kafka)
	e.RDB = e.Redis.Client(tb)
	e.NS = fmt.Sprintf("t%d", rand.Uint32())
	e.Group = "g-" + e.NS
	var err error
	if e.Store, err = redisstore.New(tb.Context(), e.RDB, redisstore.Options{Namespace: e.NS, Shards: shards}); err != nil {
		tb.Fatal(err)
	}
	e.Firer = &Firer{Store: e.Store, Writer: NewWriter(tb, e.Kafka.Brokers)}
	return e
}

// WaitState waits until every task of ids is in state want.
func (e *Env) WaitState(tb testing.TB, timeout time.Duration, want task.State, ids ...string) {
	tb.Helper()
	pending := append([]string(nil), ids...)
	testenv.WaitFor(tb, timeout, fmt.Sprintf("%d tasks %s", len(ids), want), func() bool {
		var left []string
		for _, id := range pending {
			tk, err := e.Store.Get(tb.Context(), id)
			if err != nil || tk.State != want {
				left = append(left, id)
			}
		}
		pending = left
		return len(left) == 0
	})
}
