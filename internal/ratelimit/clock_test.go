package ratelimit

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Tests that must reach the next window, or a clock near MaxDueMillis,
// without waiting move the clock the scripts see: a clockShift, a go-redis
// hook on the test's client, sends every call of a production script
// (EVALSHA of its hash, EVAL of its source) as EVAL of the same script
// whose now_ms adds the shift to Redis TIME. The production scripts and
// the Limiter know nothing of it; with a zero shift the calls go as they
// are. The shift belongs to the client: every limiter of that client sees
// it (the tests give limiters that share a client the same shift).
type clockShift struct {
	ms atomic.Int64

	mu       sync.Mutex
	variants map[int64]map[string]string // shift -> the production script's hash -> the variant's source
}

// nowLine is the line of common.lua's now_ms that a variant extends.
const nowLine = "math.floor(tonumber(t[2]) / 1000)\n"

// productionScripts are the scripts a clockShift rewrites, by hash.
var productionScripts = func() map[string]string {
	m := map[string]string{}
	for _, src := range []string{admitLua, refreshLua, usageLua, admitKeyedLua, holdLua, usageKeyedLua} {
		full := scriptSource(src)
		h := sha1.Sum([]byte(full))
		m[hex.EncodeToString(h[:])] = full
	}
	return m
}()

// clocks holds the clockShift of each client that has one.
var clocks sync.Map // redis.UniversalClient -> *clockShift

// shiftOf is the clock shift of l's client, hooked on first use.
func shiftOf(tb testing.TB, l *Limiter) *clockShift {
	tb.Helper()
	if !strings.Contains(commonLua, "local function now_ms()") || !strings.Contains(commonLua, nowLine) {
		tb.Fatalf("common.lua's now_ms changed: clock_test.go cannot shift it")
	}
	c, loaded := clocks.LoadOrStore(l.rdb, &clockShift{variants: map[int64]map[string]string{}})
	cs := c.(*clockShift)
	if !loaded {
		l.rdb.AddHook(cs)
		tb.Cleanup(func() { clocks.Delete(l.rdb) })
	}
	return cs
}

// Load, Store and Add read and move the shift (ms added to Redis TIME).
func (c *clockShift) Load() int64    { return c.ms.Load() }
func (c *clockShift) Store(ms int64) { c.ms.Store(ms) }
func (c *clockShift) Add(ms int64)   { c.ms.Add(ms) }

// variant is the source of the production script of hash sha with the
// clock shifted by ms ("" when sha is none of them).
func (c *clockShift) variant(sha string, ms int64) string {
	full, ok := productionScripts[sha]
	if !ok {
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	byHash := c.variants[ms]
	if byHash == nil {
		byHash = map[string]string{}
		c.variants[ms] = byHash
	}
	v, ok := byHash[sha]
	if !ok {
		v = strings.Replace(full, nowLine, strings.TrimSuffix(nowLine, "\n")+" + "+strconv.FormatInt(ms, 10)+"\n", 1)
		byHash[sha] = v
	}
	return v
}

// rewrite turns a production script call into EVAL of its shifted variant.
func (c *clockShift) rewrite(cmd redis.Cmder) {
	ms := c.ms.Load()
	args := cmd.Args()
	if ms == 0 || len(args) < 3 {
		return
	}
	name, _ := args[0].(string)
	body, _ := args[1].(string)
	var sha string
	switch strings.ToLower(name) {
	case "evalsha":
		sha = body
	case "eval":
		h := sha1.Sum([]byte(body))
		sha = hex.EncodeToString(h[:])
	default:
		return
	}
	if v := c.variant(sha, ms); v != "" {
		args[0], args[1] = "eval", v
	}
}

func (c *clockShift) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *clockShift) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.rewrite(cmd)
		return next(ctx, cmd)
	}
}

func (c *clockShift) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.rewrite(cmd)
		}
		return next(ctx, cmds)
	}
}
