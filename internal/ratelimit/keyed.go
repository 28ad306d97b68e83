package ratelimit

import (
	"cmp"
	"context"
	_ "embed"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/delayq/delayq/api"
)

// Limits per scope value: a rule with a key or header scope (Rule.Scope)
// applies each of its limits to every distinct value apart, with the same
// arithmetic as the type scope (admitkeyed.lua), and, unless Unordered,
// starts the tasks of one value in due order. doc.go has the semantics;
// keys.go and common.lua the Redis layout.

//go:embed admitkeyed.lua
var admitKeyedLua string

//go:embed hold.lua
var holdLua string

//go:embed usagekeyed.lua
var usageKeyedLua string

//go:embed releasekeyed.lua
var releaseKeyedLua string

//go:embed releaseone.lua
var releaseOneLua string

var (
	admitKeyedScript   = script(admitKeyedLua)
	holdScript         = script(holdLua)
	usageKeyedScript   = script(usageKeyedLua)
	releaseKeyedScript = script(releaseKeyedLua)
	releaseOneScript   = script(releaseOneLua)
)

// DefaultOrderGrace is how long after its expected return a task that
// heads its value's queue keeps its place (Options.OrderGrace).
const DefaultOrderGrace = 30 * time.Second

// minIdleHorizon is the least time a value stays in its type's :keys
// index after its last activity.
const minIdleHorizon = time.Minute

// Usage of keyed rules: how many of the most recently active values are
// read (usagekeyed.lua), and how many of the busiest are listed.
const (
	usageScan = 1000
	usageTop  = 10
)

// KeyUsage is the usage of one value of a keyed rule's scope: package
// api's.
type KeyUsage = api.KeyUsage

// scopeValue is the value of rule's scope that it is limited by: its key
// (its id when it has none) or one of its headers ("" when it lacks it:
// such tasks share the empty value). The type scope has none.
func scopeValue(rule Rule, it *Item) string {
	switch {
	case rule.Scope == api.ScopeKey:
		if it.Key == "" {
			return it.ID
		}
		return it.Key
	case len(rule.Scope) > len(api.ScopeHeaderPrefix):
		return it.Headers[rule.Scope[len(api.ScopeHeaderPrefix):]]
	}
	return ""
}

// dueMillis is an item's due time in ms (0 when unknown: it sorts first).
func dueMillis(it *Item) int64 {
	if it.Due.IsZero() {
		return 0
	}
	return it.Due.UnixMilli()
}

// sortKeyed puts a keyed group's items in decision order: grouped by
// value (each value's items contiguous, as admitkeyed.lua takes them),
// then, within a value, by due time for an ordered rule and by priority
// for an unordered one, in fetch order among equals.
func sortKeyed(g *group, items []Item) {
	type kv struct {
		i   int
		v   string
		due int64
	}
	ks := make([]kv, len(g.idx))
	for k, i := range g.idx {
		ks[k] = kv{i: i, v: scopeValue(g.rule, &items[i]), due: dueMillis(&items[i])}
	}
	ordered := g.rule.ordered()
	slices.SortFunc(ks, func(a, b kv) int {
		if c := cmp.Compare(a.v, b.v); c != 0 {
			return c
		}
		if ordered {
			if c := cmp.Compare(a.due, b.due); c != 0 {
				return c
			}
		} else if c := cmp.Compare(items[b.i].Priority, items[a.i].Priority); c != 0 {
			return c
		}
		return cmp.Compare(a.i, b.i)
	})
	g.vals = make([]string, len(ks))
	g.dues = make([]int64, len(ks))
	for k, x := range ks {
		g.idx[k], g.vals[k], g.dues[k] = x.i, x.v, x.due
	}
}

// idleHorizon is how long a value of rule stays in its type's :keys after
// its last activity: at least as long as any of its keys can live on
// (window, slot TTL, bucket refill), and at least l.minIdle
// (minIdleHorizon; tests shorten it).
func (l *Limiter) idleHorizon(rule Rule) int64 {
	h := l.minIdle.Milliseconds()
	if q := rule.WindowQuota; q != nil {
		h = max(h, q.Window.D().Milliseconds())
	}
	if c := rule.Concurrency; c != nil {
		h = max(h, c.SlotTTL.D().Milliseconds())
	}
	if b := rule.TokenBucket; b != nil && b.Rate > 0 {
		refill := float64(b.Burst)*1000/b.Rate + 1000
		if refill > float64(maxDeferralMs) {
			refill = float64(maxDeferralMs) // bucket keys live longer only for rules stored before MinRate
		}
		h = max(h, int64(refill))
	}
	return h
}

// admitKeyedCall builds the keyed admit script for the items at positions
// [from, to) of g.idx.
func (l *Limiter) admitKeyedCall(g *group, items []Item, from, to int) *call {
	base := keyedBase(l.ns, g.typ)
	c := &call{script: admitKeyedScript, keys: keyedKeys(base), first: from, n: to - from}
	ordered := g.rule.ordered()
	args := make([]any, 0, 18+c.n)
	args = append(args, base)
	args, c.prefix = l.limitArgs(args, g.rule)
	b := g.rule.TokenBucket
	flag := "0"
	if ordered {
		flag = "1"
	}
	args = append(args, flag, l.grace.Milliseconds(), l.retry.Milliseconds(),
		strconv.FormatFloat(mrand.Float64(), 'f', 6, 64), l.idleHorizon(g.rule), maxDeferralMs, c.prefix, 0, "1", nil)
	head := len(args) - 3 // m, whether each value has one task, the tasks
	size := 3             // per task: its value's count and space (mostly one digit)
	if ordered {
		size += len(items[g.idx[from]].ID) + 20
	}
	if b != nil {
		size += 2
	}
	tasks := make([]byte, 0, c.n*size)
	m := 0
	for pos := from; pos < to; {
		v := g.vals[pos]
		end := pos + 1
		for end < to && g.vals[end] == v {
			end++
		}
		args = append(args, v)
		if end-pos > 1 {
			args[head+1] = "0"
		}
		tasks = strconv.AppendInt(tasks, int64(end-pos), 10)
		tasks = append(tasks, ' ')
		for k := pos; k < end; k++ {
			it := &items[g.idx[k]]
			if ordered {
				tasks = strconv.AppendInt(tasks, g.dues[k], 10)
				tasks = append(tasks, ' ')
				tasks = strconv.AppendInt(tasks, int64(len(it.ID)), 10)
				tasks = append(tasks, ':')
				tasks = append(tasks, it.ID...)
				tasks = append(tasks, ' ')
			}
			if b != nil {
				low := byte('0')
				if it.Priority < b.MinPriority {
					low = '1'
				}
				tasks = append(tasks, low, ' ')
			}
		}
		m++
		pos = end
	}
	args[head], args[head+2] = m, tasks
	c.args = args
	return c
}

// decideKeyed turns a keyed group's script results into decisions.
func (l *Limiter) decideKeyed(g *group, out []Decision, sent time.Time) error {
	var (
		admitted int
		deferred [numReasons]int
	)
	base := keyedBase(l.ns, g.typ)
	for _, c := range g.calls {
		vals, err := c.cmd.Slice()
		if err != nil {
			return fmt.Errorf("admit %s: %w", g.typ, err)
		}
		if len(vals) != 3 {
			return fmt.Errorf("admit %s: script returned %d values, want 3", g.typ, len(vals))
		}
		now, err := asInt(vals[0])
		if err != nil {
			return fmt.Errorf("admit %s: %w", g.typ, err)
		}
		codes, ok := vals[1].(string)
		waits, ok2 := vals[2].([]any)
		if !ok || !ok2 || len(codes) != c.n {
			return fmt.Errorf("admit %s: script returned %d codes for %d items", g.typ, len(codes), c.n)
		}
		w := 0
		runKey, oneKey := base+sfxSlots, base+sfxOne
		sentMono := int64(sent.Sub(monoEpoch)) // mono() at sent
		for k := range c.n {
			pos := c.first + k
			d := &out[g.idx[pos]]
			code := codes[k]
			if code == '0' {
				admitted++
				if c.prefix != "" {
					cc := g.rule.Concurrency
					d.slotTTL, d.sent = cc.SlotTTL.D(), sent
					if cc.Limit == 1 { // admitkeyed.lua's :k1: the value, until now + ttl
						d.slot, d.runKey, d.rel, d.one = g.vals[pos], oneKey, relOne, new(oneClaim)
						d.one.exp.Store(now + cc.SlotTTL.D().Milliseconds())
						d.one.at.Store(sentMono)
					} else {
						d.slot, d.runKey, d.rel = c.prefix+strconv.Itoa(k+1)+":"+g.vals[pos], runKey, relKeyed // its slot id
					}
				}
				continue
			}
			if code < '1' || code > '0'+numReasons || w >= len(waits) {
				return fmt.Errorf("admit %s: item %d held back for reason %q", g.typ, pos, code)
			}
			wait, err := asInt(waits[w])
			if err != nil {
				return fmt.Errorf("admit %s: %w", g.typ, err)
			}
			w++
			d.Run = false
			d.Reason = reasons[code-'1']
			d.NotBefore = notBefore(now, wait)
			deferred[code-'1']++
		}
	}
	l.m.observe(g.typ, g.rule, admitted, deferred, state{}, false)
	return nil
}

// Hold keeps the place of a task that failed and goes to retry at until
// in its scope value's queue, so that the value's later tasks do not
// overtake it: they wait behind it until it is back and admitted (it then
// leaves the queue), or until it is OrderGrace late (it is then dropped:
// it was cancelled, or ended elsewhere). The worker calls it when a task
// of a type with an ordered keyed rule (a key or header scope, not
// Unordered) goes to retry; for any other type it does nothing and costs
// no Redis call. it.Due is the place it keeps (if it waits in the queue
// already, the place it has).
func (l *Limiter) Hold(ctx context.Context, it Item, until time.Time) error {
	if l.rules == nil {
		return nil
	}
	rule, ok := l.rules.Rule(it.Type)
	if !ok || !rule.ordered() {
		return nil
	}
	base := keyedBase(l.ns, it.Type)
	err := holdScript.Run(ctx, l.rdb, []string{base + "qs"},
		base, scopeValue(rule, &it), it.ID, dueMillis(&it), until.UnixMilli(),
		l.grace.Milliseconds()).Err()
	if err != nil {
		return fmt.Errorf("hold %s: %w", it.Type, err)
	}
	return nil
}

// usageKeyedCall reads a keyed rule's usage (usagekeyed.lua).
func (l *Limiter) usageKeyedCall(typ string, rule Rule) *call {
	base := keyedBase(l.ns, typ)
	win, rate, burst := usageArgs(rule)
	return &call{script: usageKeyedScript, keys: keyedKeys(base),
		args: []any{base, win, rate, burst, l.idleHorizon(rule), usageScan, usageTop}}
}

// parseUsageKeyed reads usagekeyed.lua's answer. Tokens is the sum over
// the listed values (a sum over all of them would need every bucket).
func parseUsageKeyed(v []any) (Usage, error) {
	var u Usage
	if len(v) < 5 {
		return u, fmt.Errorf("script returned %d values, want at least 5", len(v))
	}
	var err error
	if u.ActiveKeys, err = asInt(v[1]); err != nil {
		return u, err
	}
	if u.WindowCount, err = asInt(v[2]); err != nil {
		return u, err
	}
	if u.Running, err = asInt(v[3]); err != nil {
		return u, err
	}
	u.Keys = make([]KeyUsage, 0, len(v)-5)
	for _, r := range v[5:] {
		row, ok := r.([]any)
		if !ok || len(row) != 5 {
			return u, fmt.Errorf("script returned a key row %v", r)
		}
		var k KeyUsage
		var e [4]error
		k.Key, _ = row[0].(string)
		k.WindowCount, e[0] = asInt(row[1])
		k.Tokens, e[1] = asFloat(row[2])
		k.Running, e[2] = asInt(row[3])
		k.Waiting, e[3] = asInt(row[4])
		for _, err := range e {
			if err != nil {
				return u, err
			}
		}
		u.Tokens += k.Tokens
		u.Keys = append(u.Keys, k)
	}
	return u, nil
}
