package testenv

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// CommandStat is one command's line of INFO commandstats: how many times
// it ran and the microseconds it took (commands a script calls count
// under their own names; EVALSHA's time includes theirs).
type CommandStat struct {
	Calls int64
	Usec  int64
	// Rejected counts the calls refused before they ran (an ACL user
	// without the command's permission, a wrong arity): not in Calls
	Rejected int64
}

// CommandStats reads INFO commandstats, keyed by command name (evalsha,
// hget, ...). Benchmarks take it before and after a run to say where
// redis-server's time went (see CommandStatsDelta).
func CommandStats(tb testing.TB, rdb redis.UniversalClient) map[string]CommandStat {
	tb.Helper()
	info, err := rdb.Info(context.WithoutCancel(tb.Context()), "commandstats").Result()
	if err != nil {
		tb.Fatalf("testenv: INFO commandstats: %v", err)
	}
	return ParseCommandStats(info)
}

// ParseCommandStats reads the cmdstat_ lines of an INFO answer (which may
// hold other sections too).
func ParseCommandStats(info string) map[string]CommandStat {
	out := map[string]CommandStat{}
	for line := range strings.SplitSeq(info, "\r\n") {
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, fields, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		var s CommandStat
		for f := range strings.SplitSeq(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				continue
			}
			switch k {
			case "calls":
				s.Calls = n
			case "usec":
				s.Usec = n
			case "rejected_calls":
				s.Rejected = n
			}
		}
		out[name] = s
	}
	return out
}

// CommandStatsDelta formats what ran between two CommandStats per task of
// n: "evalsha 0.031 calls 8.12us, hget 2.00 calls 1.21us, ..." by time,
// the costliest first, commands under 0.05 us per task left out.
func CommandStatsDelta(before, after map[string]CommandStat, n int) string {
	type row struct {
		name        string
		calls, usec float64
	}
	var rows []row
	for name, a := range after {
		b := before[name]
		r := row{name, float64(a.Calls-b.Calls) / float64(n), float64(a.Usec-b.Usec) / float64(n)}
		if r.usec >= 0.05 {
			rows = append(rows, r)
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].usec > rows[j].usec })
	parts := make([]string, len(rows))
	for i, r := range rows {
		parts[i] = fmt.Sprintf("%s %.3f calls %.2fus", r.name, r.calls, r.usec)
	}
	return strings.Join(parts, ", ")
}
