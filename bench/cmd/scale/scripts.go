package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/delayq/delayq/internal/redisstore"
)

// -redis-scripts: where a phase's Redis time went by script, from every
// master's SLOWLOG with every command logged (slowlog-log-slower-than 0)
// over the phase. A script's entry (EVALSHA) holds its wall time in the
// server, its own commands included (Redis 7.0 logs those too, under their
// names; they are not summed again here) and any time the server was
// preempted meanwhile: on a machine whose cores the processes share, wall
// time is above CPU time, so the shares are the figure, not the sum. The
// logging itself costs the server about a tenth more CPU per task (the
// handled phase of make bench-scale: 27-29 µs against 25-26): off by
// default.

// slowlogOn empties every master's SLOWLOG and logs every command from
// now on; it returns each master's earlier threshold, for slowlogOff.
func (e *env) slowlogOn() []string {
	ctx := e.scope.Context()
	was := make([]string, len(e.nodes))
	for i, n := range e.nodes {
		v, err := n.ConfigGet(ctx, "slowlog-log-slower-than").Result()
		if err != nil {
			e.scope.Fatalf("-redis-scripts: CONFIG GET: %v", err)
		}
		was[i] = v["slowlog-log-slower-than"]
		for _, err := range []error{
			n.ConfigSet(ctx, "slowlog-max-len", "10000000").Err(),
			n.Do(ctx, "slowlog", "reset").Err(),
			n.ConfigSet(ctx, "slowlog-log-slower-than", "0").Err(),
		} {
			if err != nil {
				e.scope.Fatalf("-redis-scripts: %v", err)
			}
		}
	}
	return was
}

// scriptStat is one script's calls and wall time over a phase.
type scriptStat struct {
	name  string
	calls int
	wall  time.Duration
}

// slowlogOff restores each master's threshold and reads what was logged:
// the scripts' entries summed by name (redisstore.ScriptNames; a script
// of another package shows as its SHA1's first 8 characters).
func (e *env) slowlogOff(was []string) []scriptStat {
	ctx := e.scope.Context()
	names := redisstore.ScriptNames()
	by := map[string]*scriptStat{}
	for i, n := range e.nodes {
		if err := n.ConfigSet(ctx, "slowlog-log-slower-than", was[i]).Err(); err != nil {
			e.scope.Fatalf("-redis-scripts: CONFIG SET: %v", err)
		}
		logs, err := n.SlowLogGet(ctx, -1).Result()
		if err != nil {
			e.scope.Fatalf("-redis-scripts: SLOWLOG GET: %v", err)
		}
		for _, l := range logs {
			if len(l.Args) < 2 || !strings.EqualFold(l.Args[0], "evalsha") {
				continue
			}
			name, ok := names[l.Args[1]]
			if !ok {
				name = l.Args[1][:min(8, len(l.Args[1]))]
			}
			s := by[name]
			if s == nil {
				s = &scriptStat{name: name}
				by[name] = s
			}
			s.calls++
			s.wall += l.Duration
		}
		if err := n.Do(ctx, "slowlog", "reset").Err(); err != nil {
			e.scope.Fatalf("-redis-scripts: %v", err)
		}
	}
	out := make([]scriptStat, 0, len(by))
	for _, s := range by {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b scriptStat) int { return cmp.Compare(b.wall, a.wall) })
	return out
}

// scriptsPerTask prints a phase's scripts per task: calls, wall µs, the
// share of all scripts' wall time, and µs per call.
func (b *run) scriptsPerTask(what string, ss []scriptStat, n int) {
	if n == 0 || len(ss) == 0 {
		return
	}
	var total time.Duration
	for _, s := range ss {
		total += s.wall
	}
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = fmt.Sprintf("%s %.3f calls %.2fµs (%.0f%%, %.1fµs/call)", s.name, float64(s.calls)/float64(n),
			float64(s.wall.Microseconds())/float64(n), 100*float64(s.wall)/float64(total), float64(s.wall.Microseconds())/float64(s.calls))
	}
	say("k=%d %-8s redis scripts per task (SLOWLOG of every master, every command logged; wall time in the server, its commands included: the shares are the figure): %s",
		b.e.k, what, strings.Join(parts, ", "))
}
