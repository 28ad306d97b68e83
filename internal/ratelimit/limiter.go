package ratelimit

import (
	"cmp"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/task"
)

// Reasons a task is deferred (Decision.Reason, the deferred metric's label).
const (
	ReasonWindowQuota = "window_quota"
	ReasonTokenBucket = "token_bucket"
	ReasonConcurrency = "concurrency"
	// ReasonOrder: a rule with a key or header scope keeps the tasks of
	// one value in due order, and an earlier task of the value waits.
	ReasonOrder = "order"
)

// maxScriptItems bounds the slots one admit script adds (one ZADD); a
// larger group is split into several scripts sent in the same pipeline.
const maxScriptItems = 500

// DefaultConcurrencyRetry is how long a task held back by a full
// concurrency limit waits before it is tried again.
const DefaultConcurrencyRetry = 250 * time.Millisecond

//go:embed common.lua
var commonLua string

//go:embed admit.lua
var admitLua string

//go:embed refresh.lua
var refreshLua string

//go:embed usage.lua
var usageLua string

// scriptSource is a script as it runs: common.lua, then src.
func scriptSource(src string) string { return commonLua + "\n" + src }

func script(src string) *redis.Script { return redis.NewScript(scriptSource(src)) }

var (
	admitScript   = script(admitLua)
	refreshScript = script(refreshLua)
	usageScript   = script(usageLua)
)

// Options configure a Limiter.
type Options struct {
	// Namespace of the Redis keys; default "dq".
	Namespace string
	// Registerer receives the delayq_limit_* metrics; nil keeps them
	// unregistered.
	Registerer prometheus.Registerer
	// ConcurrencyRetry is how long a task held back by a full concurrency
	// limit waits (±20% jitter); default DefaultConcurrencyRetry.
	ConcurrencyRetry time.Duration
	// OrderGrace is how long after its expected return a task heading its
	// value's queue (an ordered keyed rule) keeps its place before it is
	// dropped; default DefaultOrderGrace.
	OrderGrace time.Duration
}

// Limiter enforces the rate limits of task types in Redis, atomically and
// shared by every process of a namespace. It is safe for concurrent use.
type Limiter struct {
	rdb   redis.UniversalClient
	rules RuleSource
	ns    string
	retry time.Duration
	grace time.Duration // Options.OrderGrace
	// minIdle is the least idle horizon of a keyed rule's :keys index
	// (minIdleHorizon; tests shorten it to see the index empty)
	minIdle time.Duration
	m       *metrics

	id  string        // random per Limiter: slot ids are id-seq
	seq atomic.Uint64 // slot id counter

	rel releases // slots Done freed, on their way to Redis (release.go)
	// relLoaded: releasekeyed.lua is known loaded in Redis (release.go)
	relLoaded atomic.Bool
}

// NewLimiter returns a limiter on rdb whose rules come from rules (nil: no
// type is limited; the low-level methods and Usage still work).
func NewLimiter(rdb redis.UniversalClient, rules RuleSource, o Options) (*Limiter, error) {
	if o.Namespace == "" {
		o.Namespace = "dq"
	}
	if o.ConcurrencyRetry <= 0 {
		o.ConcurrencyRetry = DefaultConcurrencyRetry
	}
	if o.OrderGrace <= 0 {
		o.OrderGrace = DefaultOrderGrace
	}
	if r, ok := rules.(*Rules); ok && r == nil {
		rules = nil // a nil *Rules means no rules, not a nil-pointer panic later
	}
	m, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, fmt.Errorf("rate-limit metrics: %w", err)
	}
	var id [6]byte
	_, _ = rand.Read(id[:])
	return &Limiter{
		rdb: rdb, rules: rules, ns: o.Namespace, retry: o.ConcurrencyRetry, grace: o.OrderGrace, minIdle: minIdleHorizon, m: m,
		id: hex.EncodeToString(id[:]),
	}, nil
}

// Item is one fetched task as the limiter sees it.
type Item struct {
	ID       string
	Type     string
	Priority int
	// Key is the task's key ("" when it has none: the id stands for it),
	// Headers its own headers (read only) and Due its due time: what a
	// rule with a key or header scope limits by (Rule.Scope), and orders
	// its values' tasks by.
	Key     string
	Headers map[string]string
	Due     time.Time
}

// Decision says whether an item runs now. A deferred item (Run false) must
// go back to Redis due at NotBefore — not as a failure, not as an attempt.
// An item that runs must be passed to Done when its handler finished.
type Decision struct {
	Run       bool
	NotBefore time.Time // deferred: the moment it can pass (by Redis' clock)
	Reason    string    // deferred: ReasonWindowQuota, ReasonTokenBucket, ReasonConcurrency or ReasonOrder

	slot    string        // concurrency slot held while it runs
	slotTTL time.Duration // the slot's TTL when it was taken (Refresh renews it by as much)
	sent    time.Time     // this process's clock (monotonic) when Admit sent the script that took it
	window  int64         // quota window (start ms) an admitted item counted in (type scope)
	runKey  string        // the slot's set, where Done and Refresh find it: the type's :run, or a keyed rule's :ks or :k1
	rel     relKind       // the kind of that set
	one     *oneClaim     // keyed rule with a limit of 1: the holder's claim on its slot in :k1
}

// oneClaim is the claim of the holder of a slot of a keyed rule with a
// limit of 1: the slot's expiry (ms, Redis' clock) as the holder set it
// last (admitkeyed.lua, refresh.lua); the slot is theirs only while its
// expiry is that. Copies of a Decision share it, so a Refresh made through
// one copy moves the claim that later Refresh and Done calls present.
type oneClaim struct {
	exp atomic.Int64
	at  atomic.Int64 // mono() when the request that set exp was sent
}

// Slot is the concurrency slot the item holds while it runs ("" if none).
func (d Decision) Slot() string { return d.slot }

// SlotTTL is how long the item's concurrency slot lasts from the moment
// Admit, then each Refresh that reported it held, sent its request (the
// rule's slot_ttl when the slot was taken). Zero when the item holds no
// slot.
func (d Decision) SlotTTL() time.Duration { return d.slotTTL }

// HeldUntil is the earliest moment, by this process's clock (with its
// monotonic reading, so a step of the wall clock does not move it), at
// which the slot taken by Admit can expire in Redis: when Admit sent its
// request plus SlotTTL. Redis computed the expiry from its own clock when
// the script ran, which is no earlier. Zero when the item holds no slot.
func (d Decision) HeldUntil() time.Time {
	if d.slot == "" {
		return time.Time{}
	}
	return d.sent.Add(d.slotTTL)
}

// RenewEvery is how often the holder of the item's concurrency slot must
// renew it (Refresh) while its handler runs: a third of the slot's TTL, so
// that two renewals may fail before the slot expires. Zero when the item
// holds no slot.
func (d Decision) RenewEvery() time.Duration {
	if d.slot == "" {
		return 0
	}
	return max(d.slotTTL/3, time.Millisecond)
}

// state is what a script reports about a type after deciding.
type state struct {
	now         int64
	windowStart int64
	windowCount int64
	tokens      float64
	running     int64
	earliest    int64 // earliest slot expiry when the concurrency limit is full, else -1
}

// group is the items of one limited type in a batch, highest priority
// first.
type group struct {
	typ   string
	rule  Rule
	keys  []string
	idx   []int // item indexes in decision order
	high  int   // how many of idx are at or above the bucket's min priority (all without a bucket)
	calls []*call

	// a keyed rule (Rule.Scope key or header): idx is grouped by value
	vals []string // the scope value of idx[k]
	dues []int64  // the due ms of idx[k]
}

// call is one script run, kept so that it can be re-sent after NOSCRIPT.
type call struct {
	script *redis.Script
	keys   []string
	args   []any
	cmd    *redis.Cmd
	first  int    // admit: position in idx of the call's first item
	n      int    // admit: how many items it decides
	prefix string // admit: slot id prefix (with a concurrency limit)
}

// Admit decides a fetched batch. Items are grouped by type; a type without
// a rule runs without any Redis call. For a limited type the items are
// taken highest priority first (fetch order among equals) and each must
// pass the window quota, then the token bucket, then the concurrency
// limit; only items that pass all three consume quota, a token and a slot.
// All limited types of a batch are decided in one Redis round trip (one
// script per type, pipelined).
//
// Decisions are in the order of items. On error no decision is returned
// (slots taken meanwhile are given back); quota or tokens may have been
// consumed, which can only make the limit stricter. The caller retries the
// batch later.
func (l *Limiter) Admit(ctx context.Context, items []Item) ([]Decision, error) {
	out := make([]Decision, len(items))
	for i := range out {
		out[i].Run = true
	}
	if l.rules == nil || len(items) == 0 {
		return out, nil
	}
	groups := l.group(items)
	if len(groups) == 0 {
		return out, nil
	}
	sent := time.Now() // before the request: the slots' local lease starts no later than Redis' (see HeldUntil)
	var calls []*call
	for _, g := range groups {
		for first := 0; first < len(g.idx); first += maxScriptItems {
			var c *call
			if g.rule.keyed() {
				c = l.admitKeyedCall(g, items, first, min(first+maxScriptItems, len(g.idx)))
			} else {
				c = l.admitCall(g, first, min(first+maxScriptItems, len(g.idx)))
			}
			g.calls = append(g.calls, c)
			calls = append(calls, c)
		}
	}
	l.exec(ctx, calls)
	var firstErr error
	for _, g := range groups {
		var err error
		if g.rule.keyed() {
			err = l.decideKeyed(g, out, sent)
		} else {
			err = l.decide(g, items, out, sent)
		}
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if firstErr != nil {
		l.giveBack(ctx, groups, out)
		return nil, firstErr
	}
	return out, nil
}

// Limits reports whether Admit may hold back tasks of typ: the type has a
// rule, or had one whose gauges Admit has yet to clear (group). A worker
// admits the tasks of any other type without calling Admit or Done
// (worker.LimitScoper).
func (l *Limiter) Limits(typ string) bool {
	if l.rules == nil {
		return false
	}
	if _, ok := l.rules.Rule(typ); ok { // once per run of a type in a batch
		return true
	}
	_, gauged := l.m.types.Load(typ)
	return gauged
}

// group collects the items of limited types. Runs of one type (the common
// batch) cost one rule lookup.
func (l *Limiter) group(items []Item) []*group {
	var (
		groups []*group
		byType map[string]*group // nil value: the type has no rule
		last   string
		lastG  *group
		seen   bool
	)
	for i := range items {
		typ := items[i].Type
		if !seen || typ != last {
			g, ok := byType[typ]
			if !ok {
				if rule, has := l.rules.Rule(typ); has {
					g = &group{typ: typ, rule: rule, keys: typeKeys(l.ns, typ)}
					groups = append(groups, g)
				} else if _, gauged := l.m.types.Load(typ); gauged {
					l.m.forget(typ)
				}
				if byType == nil {
					byType = make(map[string]*group, 4)
				}
				byType[typ] = g
			}
			last, lastG, seen = typ, g, true
		}
		if lastG != nil {
			lastG.idx = append(lastG.idx, i)
		}
	}
	for _, g := range groups {
		if g.rule.keyed() {
			sortKeyed(g, items)
			continue
		}
		slices.SortStableFunc(g.idx, func(a, b int) int { return cmp.Compare(items[b].Priority, items[a].Priority) })
		g.high = len(g.idx)
		if b := g.rule.TokenBucket; b != nil {
			g.high = sort.Search(len(g.idx), func(k int) bool { return items[g.idx[k]].Priority < b.MinPriority })
		}
	}
	return groups
}

// admitCall builds the admit script for the items at positions
// [from, to) of g.idx.
func (l *Limiter) admitCall(g *group, from, to int) *call {
	c := &call{script: admitScript, keys: g.keys, first: from, n: to - from}
	args := make([]any, 0, 10)
	args, c.prefix = l.limitArgs(args, g.rule)
	high := min(max(g.high-from, 0), c.n)
	args = append(args, c.n, high, c.prefix)
	c.args = args
	return c
}

// usageArgs are a rule's window (ms), rate and burst as both usage
// scripts take them (zeros for a kind the rule lacks).
func usageArgs(r Rule) (win int64, rate string, burst int64) {
	rate = "0"
	if q := r.WindowQuota; q != nil {
		win = q.Window.D().Milliseconds()
	}
	if b := r.TokenBucket; b != nil {
		rate, burst = strconv.FormatFloat(b.Rate, 'g', -1, 64), b.Burst
	}
	return win, rate, burst
}

// limitArgs appends a rule's limits as both admit scripts take them:
// window limit and ms, rate, burst and reserve, concurrency limit and slot
// TTL ms (zeros for a kind the rule lacks). With a concurrency limit it
// returns the call's slot id prefix (a slot is prefix .. i), else "".
func (l *Limiter) limitArgs(args []any, r Rule) ([]any, string) {
	if q := r.WindowQuota; q != nil {
		args = append(args, q.Limit, q.Window.D().Milliseconds())
	} else {
		args = append(args, 0, 0)
	}
	if b := r.TokenBucket; b != nil {
		args = append(args, strconv.FormatFloat(b.Rate, 'g', -1, 64), b.Burst, b.Reserve)
	} else {
		args = append(args, 0, 0, 0)
	}
	cc := r.Concurrency
	if cc == nil {
		return append(args, 0, 0), ""
	}
	return append(args, cc.Limit, cc.SlotTTL.D().Milliseconds()), l.id + "-" + strconv.FormatUint(l.seq.Add(1), 36) + ":"
}

// exec sends calls in one round trip: a single call with EVALSHA (EVAL on
// NOSCRIPT), several in a pipeline, re-sending those that met NOSCRIPT
// (after a Redis restart) one by one, which loads the script.
//
// The releases Done queued go first, in the same pipeline (release.go).
func (l *Limiter) exec(ctx context.Context, calls []*call) {
	rel := l.rel.takeForAdmit()
	l.loadReleaseScripts(ctx, rel)
	if len(calls) == 1 && len(rel.args) == 0 {
		c := calls[0]
		c.cmd = c.script.Run(ctx, l.rdb, c.keys, c.args...)
		return
	}
	pipe := l.rdb.Pipeline()
	relCmds := rel.queue(ctx, pipe)
	for _, c := range calls {
		c.cmd = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	l.settleReleases(rel, relCmds)
	for _, c := range calls {
		if isNoScript(c.cmd.Err()) {
			c.cmd = c.script.Run(ctx, l.rdb, c.keys, c.args...)
		}
	}
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// decide turns g's script results into decisions; sent is when the
// scripts were sent (the local start of the slots' leases).
func (l *Limiter) decide(g *group, items []Item, out []Decision, sent time.Time) error {
	var (
		admitted  int
		deferred  [numReasons]int
		tokenWait int // token-deferred items so far: each waits for one more token
		st        state
	)
	for _, c := range g.calls {
		vals, err := c.cmd.Slice()
		if err != nil {
			return fmt.Errorf("admit %s: %w", g.typ, err)
		}
		var take int
		var why [2]int64 // what holds back the next high and the next low item
		st, take, why, err = parseAdmit(vals)
		if err != nil {
			return fmt.Errorf("admit %s: %w", g.typ, err)
		}
		if take < 0 || take > c.n {
			return fmt.Errorf("admit %s: script admitted %d of %d", g.typ, take, c.n)
		}
		for k := range c.n {
			pos := c.first + k
			i := g.idx[pos]
			d := &out[i]
			if k < take {
				admitted++
				if c.prefix != "" {
					d.slot = c.prefix + strconv.Itoa(k+1)
					d.slotTTL = g.rule.Concurrency.SlotTTL.D()
					d.sent = sent
					d.runKey, d.rel = g.keys[keyRunning], relType
				}
				d.window = st.windowStart
				continue
			}
			reason := why[0]
			if pos >= g.high {
				reason = why[1]
			}
			d.Run = false
			switch reason {
			case 1:
				d.Reason = ReasonWindowQuota
				d.NotBefore = notBefore(st.now, st.windowStart+g.rule.WindowQuota.Window.D().Milliseconds()-st.now)
			case 2:
				d.Reason = ReasonTokenBucket
				d.NotBefore = notBefore(st.now, tokenWaitMs(g.rule.TokenBucket, items[i].Priority, st.tokens, tokenWait))
				tokenWait++
			case 3:
				d.Reason = ReasonConcurrency
				d.NotBefore = notBefore(st.now, l.concurrencyWait(st))
			default:
				return fmt.Errorf("admit %s: item %d held back for reason %d", g.typ, pos, reason)
			}
			deferred[reason-1]++
		}
	}
	l.m.observe(g.typ, g.rule, admitted, deferred, st, true)
	return nil
}

// maxDeferralMs is MaxDeferral in ms.
const maxDeferralMs = int64(MaxDeferral / time.Millisecond)

// notBefore is when a deferred item may pass: wait ms after now (Redis'
// clock, ms), at least 1 ms and at most MaxDeferral ahead, and never after
// task.MaxDueMillis, the latest due time the store can hold. The sums
// cannot overflow: wait is clamped before it is added.
func notBefore(now, wait int64) time.Time {
	wait = min(max(wait, 1), maxDeferralMs)
	if now > task.MaxDueMillis-wait {
		return time.UnixMilli(task.MaxDueMillis)
	}
	return time.UnixMilli(now + wait)
}

// tokenWaitMs is how long until the bucket holds the token of the ahead+1-th
// waiting item: one token per item ahead of it, plus the reserve for an item
// below the bucket's min priority. It is computed in float64 and clamped to
// [1, MaxDeferral] before the conversion to int64 (a float64 beyond the
// int64 range converts to an implementation-defined value: with a rate of
// 1e-17, -2^63, which made a deferral due at once), so any rate, however
// small (a rule stored before MinRate), gives a wait in that range, and a
// later item never waits less than an earlier one.
func tokenWaitMs(b *TokenBucket, priority int, tokens float64, ahead int) int64 {
	need := float64(ahead) + 1 - tokens
	if priority < b.MinPriority {
		need += float64(b.Reserve)
	}
	if !(b.Rate > 0) {
		return maxDeferralMs // no refill (a rule that Validate refuses): as late as a deferral goes
	}
	ms := math.Ceil(need * 1000 / b.Rate)
	switch {
	case !(ms < float64(maxDeferralMs)): // beyond the horizon, +Inf, NaN
		return maxDeferralMs
	case !(ms > 1): // the token is there already, -Inf
		return 1
	}
	return int64(ms)
}

// concurrencyWait is how long (ms) a task held back by a full concurrency
// limit waits before it tries again: the retry delay with jitter, or until
// the earliest slot expires if that is sooner.
func (l *Limiter) concurrencyWait(st state) int64 {
	wait := max(int64(float64(l.retry.Milliseconds())*(0.8+0.4*mrand.Float64())), 1)
	if st.earliest > st.now && st.earliest-st.now < wait {
		wait = st.earliest - st.now
	}
	return wait
}

// giveBack releases the slots of admitted items after a failed Admit.
func (l *Limiter) giveBack(ctx context.Context, groups []*group, out []Decision) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	for _, g := range groups {
		var slots []any
		for _, i := range g.idx {
			d := &out[i]
			switch {
			case d.slot == "":
			case d.rel == relOne:
				_ = releaseOneScript.Run(ctx, l.rdb, []string{d.runKey}, d.slot, d.one.exp.Load()).Err()
			case d.rel == relKeyed:
				_ = releaseKeyedScript.Run(ctx, l.rdb, []string{d.runKey}, d.slot).Err()
			default:
				slots = append(slots, d.slot)
			}
		}
		if len(slots) > 0 {
			_ = l.rdb.ZRem(ctx, g.keys[keyRunning], slots...).Err() // best effort: they expire anyway
		}
	}
}

func parseAdmit(v []any) (st state, take int, why [2]int64, err error) {
	if len(v) != 9 {
		return st, 0, why, fmt.Errorf("admit script returned %d values, want 9", len(v))
	}
	ints := []*int64{&st.now, &st.windowStart, &st.windowCount, nil, &st.running, &st.earliest, nil, &why[0], &why[1]}
	for k, p := range ints {
		if p == nil {
			continue
		}
		if *p, err = asInt(v[k]); err != nil {
			return st, 0, why, err
		}
	}
	if st.tokens, err = asFloat(v[3]); err != nil {
		return st, 0, why, err
	}
	t, err := asInt(v[6])
	return st, int(t), why, err
}

func asInt(v any) (int64, error) {
	if n, ok := v.(int64); ok {
		return n, nil
	}
	return 0, fmt.Errorf("script returned %T (%v), want an integer", v, v)
}

func asFloat(v any) (float64, error) {
	s, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("script returned %T (%v), want a number string", v, v)
	}
	return strconv.ParseFloat(s, 64)
}

// Done frees the concurrency slot an admitted item held. Call it when the
// item's handler finished (whatever the outcome); it is a no-op for an item
// without a slot (and for a slot already gone). The slot is freed in
// Redis with this Limiter's next Admit or within releaseDelay, in one
// command with the other slots freed meanwhile (release.go); Flush sends
// it at once. It returns no error: a failed release is sent again.
func (l *Limiter) Done(ctx context.Context, it Item, d Decision) error {
	if d.slot == "" {
		return nil
	}
	// release.go: with the next Admit, or within releaseDelay
	e := relEntry{slot: d.slot}
	if d.rel == relOne {
		e.claim, e.fresh = d.one.exp.Load(), d.one.at.Load()+int64(d.slotTTL/2)
	}
	l.release(d.runKey, d.rel, e)
	return nil
}

// Refresh pushes the expiry of the slot an admitted item holds to now plus
// the slot's TTL (d.SlotTTL(), the one it was taken with; refresh.lua),
// for handlers that run longer than the TTL: the holder calls it every
// d.RenewEvery() while the handler runs, so the limit holds however long
// the handler takes, and the slot of a holder that crashed still expires
// one TTL after its last renewal. When Refresh reports the slot held, it
// lasts at least SlotTTL from when Refresh was called (the holder's local
// lease). It reports false when the slot was lost (expired or released:
// another task may have taken it). A type whose rule no longer has a
// concurrency limit holds nothing: that is reported as held.
func (l *Limiter) Refresh(ctx context.Context, it Item, d Decision) (bool, error) {
	if d.slot == "" || l.rules == nil {
		return true, nil
	}
	rule, ok := l.rules.Rule(it.Type)
	if !ok || rule.Concurrency == nil {
		return true, nil // no limit any more: nothing to hold
	}
	args := []any{d.slotTTL.Milliseconds(), d.slot, "0"} // refresh.lua: the set's kind
	var claim int64                                      // relEntry.claim: a limit-1 keyed slot's, else 0
	switch d.rel {
	case relOne:
		claim = d.one.exp.Load()
		args[2] = "2"
		args = append(args, claim)
	case relKeyed:
		args[2] = "1"
	}
	if l.rel.has(d.runKey, d.slot, claim) {
		return false, nil // released by Done, on its way to Redis
	}
	at := mono()
	v, err := refreshScript.Run(ctx, l.rdb, []string{d.runKey}, args...).Int64()
	if err != nil {
		return false, fmt.Errorf("refresh slot %s: %w", it.Type, err)
	}
	if d.rel == relOne && v > 1 { // the claim the next Refresh and Done present
		d.one.exp.Store(v)
		d.one.at.Store(at)
	}
	return v >= 1, nil
}

// Usage is a type's current consumption, for the API. Under a rule with
// a key or header scope, ActiveKeys is how many values have state, Keys
// the busiest of them (at most 10 among the 1,000 most recently active:
// most slots held, then most tasks waiting in order, then most admitted
// in the window), WindowCount and Running the sums over those 1,000 and
// Tokens the sum over the listed ones.
type Usage struct {
	WindowCount int64      `json:"window_count"` // admitted in the current quota window
	Tokens      float64    `json:"tokens"`       // tokens in the bucket now
	Running     int64      `json:"running"`      // concurrency slots held (unexpired)
	ActiveKeys  int64      `json:"active_keys,omitempty"`
	Keys        []KeyUsage `json:"keys,omitempty"`
}

// Usage reads typ's current usage under rule. It changes nothing.
func (l *Limiter) Usage(ctx context.Context, typ string, rule Rule) (Usage, error) {
	m, err := l.UsageOf(ctx, map[string]Rule{typ: rule})
	if err != nil {
		return Usage{}, err
	}
	return m[typ], nil
}

// UsageOf reads the usage of several types in one round trip.
func (l *Limiter) UsageOf(ctx context.Context, rules map[string]Rule) (map[string]Usage, error) {
	types := make([]string, 0, len(rules))
	calls := make([]*call, 0, len(rules))
	for typ, rule := range rules {
		if rule.keyed() {
			types = append(types, typ)
			calls = append(calls, l.usageKeyedCall(typ, rule))
			continue
		}
		win, rate, burst := usageArgs(rule)
		types = append(types, typ)
		calls = append(calls, &call{script: usageScript, keys: typeKeys(l.ns, typ), args: []any{win, rate, burst}})
	}
	out := make(map[string]Usage, len(rules))
	if len(calls) == 0 {
		return out, nil
	}
	l.exec(ctx, calls)
	for k, c := range calls {
		v, err := c.cmd.Slice()
		if err != nil {
			return nil, fmt.Errorf("usage %s: %w", types[k], err)
		}
		if c.script == usageKeyedScript {
			u, err := parseUsageKeyed(v)
			if err != nil {
				return nil, fmt.Errorf("usage %s: %w", types[k], err)
			}
			out[types[k]] = u
			continue
		}
		if len(v) != 4 {
			return nil, fmt.Errorf("usage %s: script returned %d values", types[k], len(v))
		}
		count, err1 := asInt(v[0])
		tokens, err2 := asFloat(v[1])
		running, err3 := asInt(v[2])
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("usage %s: %w", types[k], err)
		}
		out[types[k]] = Usage{WindowCount: count, Tokens: tokens, Running: running}
	}
	return out, nil
}
