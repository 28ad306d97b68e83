package redisstore

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// The floor probes: the least Redis work each hot path must do, as bare
// scripts, measured next to the real transitions on the same data. They
// are measurements, not transitions of the store (nothing calls them
// outside this benchmark). KEYS[1] is the shard's key prefix; the claim
// and finish probes get the bucket key of task i as KEYS[i+1], as the real
// scripts do (hashing an id in Lua costs ~3 µs, more than the rest).
var floorProbes = map[string]string{
	// the due set alone: what any take pays, whatever it reads
	"take/due-set": `local due = redis.call('ZRANGE', KEYS[1] .. 'due', '-inf', '(' .. string.format('%d', now_ms() + 1), 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[1]))
redis.call('ZREMRANGEBYRANK', KEYS[1] .. 'due', 0, #due - 1)
return #due`,
	// plus one record read per task, the records returned: the least a
	// take pays while records live in bucket hashes
	"take/due-set+record": `local due = redis.call('ZRANGE', KEYS[1] .. 'due', '-inf', '(' .. string.format('%d', now_ms() + 1), 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[1]), 'WITHSCORES')
redis.call('ZREMRANGEBYRANK', KEYS[1] .. 'due', 0, #due / 2 - 1)
local out = {}
for i = 1, #due, 2 do
  local _, bkey = due_of_score(KEYS[1], tonumber(due[i + 1]))
  local v = redis.call('HGET', bkey, due[i])
  if v then out[#out + 1] = due[i]; out[#out + 1] = v end
end
return out`,
	// read the record (its generation), set a run marker with a TTL
	"claim/record+marker": `local n = 0
for i = 1, #ARGV do
  local id = ARGV[i]
  if redis.call('HGET', KEYS[i + 1], id) then
    redis.call('SET', KEYS[1] .. 'run:' .. id, 'o', 'PX', 30000)
    n = n + 1
  end
end
return n`,
	// store the outcome in the record, drop the marker, one done-set ZADD
	"finish/record+marker+done": `local done = {}
for i = 1, #ARGV do
  local id = ARGV[i]
  local v = redis.call('HGET', KEYS[i + 1], id)
  redis.call('HSET', KEYS[i + 1], id, 'S' .. string.sub(v, 2))
  redis.call('DEL', KEYS[1] .. 'run:' .. id)
  done[2 * i - 1] = 1700000000000
  done[2 * i] = id
end
zadd_all(KEYS[1] .. 'done', done)
return #ARGV`,
	// probes of the lean claim's parts (issue #20)
	"x/args-only": `return #ARGV`,
	"x/hget-count": `local n = 0
for i = 1, #ARGV do
  if redis.call('HGET', KEYS[i + 1], ARGV[i]) then n = n + 1 end
end
return n`,
	"x/hget-reply": `local out = {}
for i = 1, #ARGV do
  out[i] = redis.call('HGET', KEYS[i + 1], ARGV[i]) or ''
end
return out`,
	"x/hget-parse": `local n = 0
for i = 1, #ARGV do
  local v = redis.call('HGET', KEYS[i + 1], ARGV[i])
  if v then local st, gen, att, due = parse(v); n = n + gen end
end
return n`,
	"x/hmget-hset": `local f = {}
for i = 1, #ARGV do f[i] = ARGV[i] .. ':0' end
redis.call('HMGET', KEYS[1] .. 'xruns', unpack(f))
local set = {}
for i = 1, #ARGV do set[2 * i - 1] = f[i]; set[2 * i] = '1700000000000|owner:123' end
redis.call('HSET', KEYS[1] .. 'xruns', unpack(set))
return #ARGV`,
	"x/hget-hset": `local n = 0
for i = 1, #ARGV do
  local v = redis.call('HGET', KEYS[i + 1], ARGV[i])
  redis.call('HSET', KEYS[i + 1], ARGV[i], v)
end
return n`,
	// the done-marker of issue #4 in its cheapest form: one ZADD of
	// "<id>:<gen>" (ARGV, formatted by the caller) scored by its expiry,
	// for the whole call
	"done-marker/zadd": `local done = {}
for i = 1, #ARGV do
  done[2 * i - 1] = 1700000000000
  done[2 * i] = ARGV[i]
end
zadd_all(KEYS[1] .. 'xdone', done)
return #ARGV`,
	// and its check, one ZMSCORE for the whole call
	"done-check/zmscore": `return #redis.call('ZMSCORE', KEYS[1] .. 'xdone', unpack(ARGV))`,
}

// BenchmarkRedisFloor measures redis-server CPU per task (INFO cpu) of the
// fire path's take and the worker's claim and finish, each next to the
// least Redis work that path must do (floorProbes), on 200,000 tasks of 16
// shards (36-character ids, 100-byte payload). Each case runs on a
// namespace of its own, freshly scheduled. Work cases send 100 tasks per
// script call, all calls of a shard in one pipeline; takes take 500.
//
// It is the evidence behind the throughput targets of issues #3 and #4
// (docs/benchmarks.md, "Session 5"): a ratio to raw kafka-go is bounded by
// raw's CPU per record / (raw's + ours), and these are the Redis parts of
// ours.
//
//	go test ./internal/redisstore -run '^$' -bench BenchmarkRedisFloor -benchtime 1x
func BenchmarkRedisFloor(b *testing.B) {
	const n, shards, per, batch = 200_000, 16, 100, 500
	for range b.N {
		r := testenv.StartRedis(b)
		rdb := r.Client(b)
		seq := 0
		// fresh schedules n tasks due at due into a namespace of their own
		fresh := func(due time.Time) (*Store, [][]string) {
			seq++
			s, err := New(b.Context(), rdb, Options{Namespace: "floor" + strconv.Itoa(seq), Shards: shards})
			if err != nil {
				b.Fatal(err)
			}
			return s, scheduleBench(b, s, n, due)
		}
		// measure runs f and returns redis-server CPU per task
		measure := func(name string, f func()) float64 {
			cpu0 := testenv.RedisCPU(b, rdb)
			f()
			us := float64((testenv.RedisCPU(b, rdb) - cpu0).Microseconds()) / n
			fmt.Printf("  %-28s %5.2f us of redis-server CPU per task\n", name, us)
			b.ReportMetric(us, name+"-us/task")
			return us
		}
		// probe runs a floor probe over every task, per tasks per call
		probe := func(s *Store, ids [][]string, name string) {
			sc := redis.NewScript(commonLua + "\n" + floorProbes[name])
			if err := sc.Load(b.Context(), rdb).Err(); err != nil {
				b.Fatal(err)
			}
			for sh := range shards {
				p := rdb.Pipeline()
				for i := 0; i < len(ids[sh]); i += per {
					keys := []string{s.k.prefix[sh]}
					var args []any
					for _, id := range ids[sh][i:min(i+per, len(ids[sh]))] {
						keys = append(keys, s.k.bucket(sh, id))
						if strings.HasPrefix(name, "done-") {
							args = append(args, id+":0") // <id>:<gen>
						} else {
							args = append(args, id)
						}
					}
					sc.Run(b.Context(), p, keys, args...)
				}
				if _, err := p.Exec(b.Context()); err != nil {
					b.Fatalf("%s: %v", name, err)
				}
			}
		}
		// drain takes every due task of every shard, batch per call
		drain := func(take func(sh int) int) {
			taken := 0
			for sh := range shards {
				for k := take(sh); k > 0; k = take(sh) {
					taken += k
				}
			}
			if taken != n {
				b.Fatalf("took %d of %d", taken, n)
			}
		}
		// fire takes every task of s with a lease of lease (Store.Take)
		fire := func(s *Store, lease time.Duration) {
			if taken := drainShards(b, s, batch, lease); taken != n {
				b.Fatalf("took %d of %d", taken, n)
			}
		}
		past, future := time.Now().Add(-time.Second), time.Now().Add(time.Hour)

		fmt.Printf("\nRedis floor, %d tasks, 16 shards; takes of %d, claims and finishes of %d per script call; redis-server CPU from INFO cpu\n", n, batch, per)
		// takeProbe drains a fresh namespace with a take probe; the reply is
		// a count (the due set alone) or id, record pairs
		takeProbe := func(name string) float64 {
			s, _ := fresh(past)
			sc := redis.NewScript(commonLua + "\n" + floorProbes[name])
			return measure(name, func() {
				drain(func(sh int) int {
					v, err := sc.Run(b.Context(), rdb, []string{s.k.prefix[sh]}, batch).Result()
					if err != nil {
						b.Fatal(err)
					}
					if pairs, ok := v.([]any); ok {
						return len(pairs) / 2
					}
					k, _ := v.(int64)
					return int(k)
				})
			})
		}
		dueSet := takeProbe("take/due-set")
		takeFloor := takeProbe("take/due-set+record")
		s, _ := fresh(past)
		take := measure("take/Store.Take", func() {
			fire(s, time.Minute)
		})

		s, ids := fresh(future)
		claimFloor := measure("claim/record+marker", func() { probe(s, ids, "claim/record+marker") })
		finishFloor := measure("finish/record+marker+done", func() { probe(s, ids, "finish/record+marker+done") })
		// the real claim and finish run on fired tasks (taken, out of the
		// due set), as a worker meets them
		sched := measure("schedule/Store.Schedule", func() { s, ids = fresh(past) })
		fire(s, time.Hour)
		var all []string
		for _, sh := range ids {
			all = append(all, sh...)
		}
		claim := measure("claim/Store.ClaimMany", func() {
			for i := 0; i < n; i += 1000 {
				cs := make([]Claim, 0, 1000)
				for _, id := range all[i:min(i+1000, n)] {
					cs = append(cs, Claim{ID: id, TTL: 30 * time.Second, Owner: "o"})
				}
				if _, err := s.ClaimMany(b.Context(), cs); err != nil {
					b.Fatal(err)
				}
			}
		})
		finish := measure("finish/Store.FinishMany", func() {
			for i := 0; i < n; i += 1000 {
				fs := make([]Finish, 0, 1000)
				for _, id := range all[i:min(i+1000, n)] {
					fs = append(fs, Finish{ID: id, Kind: Succeeded, Owner: "o"})
				}
				res, err := s.FinishMany(b.Context(), fs)
				if err != nil {
					b.Fatal(err)
				}
				if res[0].State != task.StateSucceeded {
					b.Fatalf("finish: %+v", res[0])
				}
			}
		})
		// a worker under moderate load claims and finishes micro-batches of
		// a few tasks, spread over the shards: on one redis-server, one
		// script call each (packCalls) instead of one per shard
		s2, ids2 := fresh(past)
		fire(s2, time.Hour)
		mixed := roundRobin(ids2, n)
		small := measure("claim+finish/batches-of-16", func() { claimFinishBatches(b, s2, mixed, 16) })
		for _, x := range []string{"x/args-only", "x/hget-count", "x/hget-reply", "x/hget-parse", "x/hmget-hset", "x/hget-hset"} {
			measure(x, func() { probe(s, ids, x) })
		}
		doneMark := measure("done-marker/zadd", func() { probe(s, ids, "done-marker/zadd") })
		doneCheck := measure("done-check/zmscore", func() { probe(s, ids, "done-check/zmscore") })

		fmt.Printf("  write path: schedule %.2f us per task (batches of 1000)\n", sched)
		fmt.Printf("  fire path: take %.2f us per task; its floor %.2f us (the due set alone %.2f)\n", take, takeFloor, dueSet)
		fmt.Printf("  work path: claim + finish %.2f us per task; their floor (record, run marker, done set) %.2f us; a done-marker and its check alone %.2f us\n",
			claim+finish, claimFloor+finishFloor, doneMark+doneCheck)
		fmt.Printf("  work path in micro-batches of 16 tasks over the 16 shards: claim + finish %.2f us per task\n", small)
	}
}
