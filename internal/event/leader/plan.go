package leader

import (
	"encoding/binary"
	"hash/fnv"
	"math"
	"slices"
	"sort"
)

// View is what one process knows when it decides: the live members and,
// per shard, who leads it.
type View struct {
	// Self is the deciding process.
	Self string
	// Members are the live processes (Self is added when missing).
	Members []string
	// Leaders has one entry per shard: the process that leads the shard or
	// campaigns for it, "" when nobody does. A leader that is not a member
	// (a dead process whose key has not expired yet, a stale key of our own)
	// makes the shard unavailable: nobody can win it before the key goes.
	Leaders []string
	// Since, when set, has one entry per shard: for a shard of Self's,
	// the revision at which its leadership began (its fence token), 0
	// while Self only campaigns for it. It orders what a process over its
	// target gives back (see Decide); other entries are ignored.
	Since []int64
}

// Plan is what Decide tells the process to do.
type Plan struct {
	Acquire []int // leaderless shards to campaign for, best first
	Release []int // shards to give back
}

// Targets returns how many shards each member should lead: N/M, plus one
// for N mod M of them. The extra shards go first to members that already
// lead at least N/M+1 (so that nobody gives back a shard only to see another
// process take it), then by process id; every process computes the same
// assignment from the same view.
func Targets(members []string, leaders []string) map[string]int {
	m := len(members)
	if m == 0 {
		return nil
	}
	count := make(map[string]int, m)
	for _, l := range leaders {
		count[l]++
	}
	n := len(leaders)
	lower, extra := n/m, n%m
	order := slices.Clone(members)
	sort.Slice(order, func(i, j int) bool {
		hi, hj := count[order[i]] > lower, count[order[j]] > lower
		if hi != hj {
			return hi
		}
		return order[i] < order[j]
	})
	t := make(map[string]int, m)
	for i, p := range order {
		t[p] = lower
		if i < extra {
			t[p]++
		}
	}
	return t
}

// Decide is the balancing rule, a pure function of the view. A process
// below its target campaigns for leaderless shards (the ones it prefers
// most, so that processes rarely race for the same shard); a process above
// its target gives back its campaigns first, then the shards it has led
// the shortest time (see sortForRelease). Shards held by
// non-members are left alone: they become free when the key expires.
func Decide(v View) Plan {
	members := dedupe(append(slices.Clone(v.Members), v.Self))
	live := make(map[string]bool, len(members))
	for _, p := range members {
		live[p] = true
	}
	leaders := make([]string, len(v.Leaders))
	for s, l := range v.Leaders {
		if l != "" && !live[l] {
			l = "\x00unavailable"
		}
		leaders[s] = l
	}
	target := Targets(members, leaders)[v.Self]

	var mine, free []int
	for s, l := range leaders {
		switch l {
		case v.Self:
			mine = append(mine, s)
		case "":
			free = append(free, s)
		}
	}
	var p Plan
	switch {
	case len(mine) > target:
		sortForRelease(v, mine)
		p.Release = slices.Clone(mine[target:])
	case len(mine) < target && len(free) > 0:
		sortByPreference(v.Self, free)
		p.Acquire = slices.Clone(free[:min(target-len(mine), len(free))])
	}
	return p
}

// preference is a rendezvous hash: each process ranks the shards in its own
// stable order, so that concurrent campaigners spread over different shards
// and a process keeps the same shards across rebalancing.
func preference(self string, shard int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(self))
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(shard))
	h.Write(b[:])
	// FNV alone keeps nearby shards in nearly the same order for every
	// process; a splitmix64 finalizer spreads them.
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// sortByPreference sorts shards most preferred first.
func sortByPreference(self string, shards []int) {
	sort.Slice(shards, func(i, j int) bool {
		pi, pj := preference(self, shards[i]), preference(self, shards[j])
		if pi != pj {
			return pi > pj
		}
		return shards[i] < shards[j]
	})
}

// sortForRelease sorts Self's shards in the order to keep them: the
// shards it leads before those it only campaigns for (withdrawing a
// campaign stops nothing), the longest-led first (a shard taken a moment
// ago, by a process that counted too few members, goes back before one
// it has led for hours and that others expect it to keep), then by
// preference. Without Since, by preference alone.
func sortForRelease(v View, shards []int) {
	if v.Since == nil {
		sortByPreference(v.Self, shards)
		return
	}
	since := func(s int) int64 {
		if s < len(v.Since) && v.Since[s] > 0 {
			return v.Since[s]
		}
		return math.MaxInt64 // a campaign: the newest of all
	}
	sort.Slice(shards, func(i, j int) bool {
		si, sj := since(shards[i]), since(shards[j])
		if si != sj {
			return si < sj
		}
		pi, pj := preference(v.Self, shards[i]), preference(v.Self, shards[j])
		if pi != pj {
			return pi > pj
		}
		return shards[i] < shards[j]
	})
}

func dedupe(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}
