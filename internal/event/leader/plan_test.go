package leader

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// leaders builds a leader list from "a a b - c" (one entry per shard,
// "-" for none).
func leaders(s string) []string {
	f := strings.Fields(s)
	for i, x := range f {
		if x == "-" {
			f[i] = ""
		}
	}
	return f
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name        string
		self        string
		members     []string
		leaders     string
		acquire     int // how many shards to campaign for
		release     int // how many to give back
		releaseFrom []int
	}{
		{name: "alone takes everything", self: "a", members: []string{"a"}, leaders: "- - - -", acquire: 4},
		{name: "self added when missing from members", self: "a", members: nil, leaders: "- -", acquire: 2},
		{name: "balanced: nothing to do", self: "a", members: []string{"a", "b"}, leaders: "a a b b"},
		{name: "a newcomer takes its share", self: "c", members: []string{"a", "b", "c"}, leaders: "a a a b b b - -", acquire: 2},
		{name: "above target gives back", self: "a", members: []string{"a", "b"}, leaders: "a a a a a b", release: 2},
		{name: "exactly one process keeps the extra shard", self: "a", members: []string{"a", "b"}, leaders: "a a a b b"},
		{name: "the other one does not take the extra", self: "b", members: []string{"a", "b"}, leaders: "a a a b b"},
		{
			// 16 shards, 3 members: 6/5/5. a and b hold 8 each; a joins
			// the extra (lowest id among those above the lower target).
			name: "newcomer: first with extra keeps 6", self: "a", members: []string{"a", "b", "c"},
			leaders: "a a a a a a a a b b b b b b b b", release: 2,
		},
		{
			name: "newcomer: second gives back to 5", self: "b", members: []string{"a", "b", "c"},
			leaders: "a a a a a a a a b b b b b b b b", release: 3,
		},
		{
			name: "newcomer: the new process takes 5", self: "c", members: []string{"a", "b", "c"},
			leaders: "a a a a a a - - b b b b b - - -", acquire: 5,
		},
		{
			// A member already at the upper target keeps the extra even
			// though another id sorts first: no shard moves for nothing.
			name: "the extra stays where it is", self: "a", members: []string{"a", "b", "c"},
			leaders: "a a a a a b b b b b b c c c c c",
		},
		{
			name: "a dead member's shards are not available until its key expires", self: "a",
			members: []string{"a"}, leaders: "a dead dead -", acquire: 1,
		},
		{
			name: "dead member shards, two survivors split the free ones", self: "a", members: []string{"a", "b"},
			leaders: "a a a b b b - - - -", acquire: 2,
		},
		{
			name: "below target but nothing free: wait", self: "c", members: []string{"a", "b", "c"},
			leaders: "a a a a b b b b",
		},
		{name: "no shards", self: "a", members: []string{"a", "b"}, leaders: ""},
		{name: "more members than shards: one each", self: "c", members: []string{"a", "b", "c", "d"}, leaders: "a b - -", acquire: 1},
		{name: "more members than shards: d waits", self: "d", members: []string{"a", "b", "c", "d"}, leaders: "a b c", acquire: 0},
		{name: "more members than shards: gives back the second", self: "a", members: []string{"a", "b", "c"}, leaders: "a a", release: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := leaders(tt.leaders)
			p := Decide(View{Self: tt.self, Members: tt.members, Leaders: l})
			if len(p.Acquire) != tt.acquire || len(p.Release) != tt.release {
				t.Fatalf("Decide = acquire %v release %v, want %d and %d", p.Acquire, p.Release, tt.acquire, tt.release)
			}
			for _, s := range p.Acquire {
				if l[s] != "" {
					t.Errorf("acquire shard %d led by %q", s, l[s])
				}
			}
			for _, s := range p.Release {
				if l[s] != tt.self {
					t.Errorf("release shard %d led by %q", s, l[s])
				}
			}
		})
	}
}

// TestDecideConverges plays rounds where every member applies its plan
// against the same view, and checks that any start ends balanced within
// one shard and then stays put.
func TestDecideConverges(t *testing.T) {
	for _, tc := range []struct {
		shards  int
		members []string
		start   string
	}{
		{16, []string{"a", "b", "c"}, ""},
		{16, []string{"a", "b", "c"}, strings.Repeat("a ", 8) + strings.Repeat("b ", 8)},
		{16, []string{"a", "b"}, strings.Repeat("a ", 6) + strings.Repeat("b ", 5) + strings.Repeat("- ", 5)},
		{16, []string{"a", "b", "c", "d", "e"}, strings.Repeat("e ", 16)},
		{7, []string{"x", "y", "z"}, "x x x x x x x"},
		{3, []string{"p", "q", "r", "s"}, "s s s"},
	} {
		t.Run(fmt.Sprintf("%d/%v", tc.shards, tc.members), func(t *testing.T) {
			l := make([]string, tc.shards)
			copy(l, leaders(tc.start))
			moves := 0
			for round := range 10 {
				changed := false
				// Every member decides on the same view; campaigns for the
				// same shard are won by the first in member order.
				view := slices.Clone(l)
				for _, m := range tc.members {
					p := Decide(View{Self: m, Members: tc.members, Leaders: view})
					for _, s := range p.Release {
						l[s], changed = "", true
						moves++
					}
					for _, s := range p.Acquire {
						if l[s] == "" {
							l[s], changed = m, true
							moves++
						}
					}
				}
				if !changed && round > 0 {
					break
				}
			}
			counts := map[string]int{}
			for _, x := range l {
				if x == "" {
					t.Fatalf("shard left without leader: %v", l)
				}
				counts[x]++
			}
			lo, hi := tc.shards, 0
			for _, m := range tc.members {
				lo, hi = min(lo, counts[m]), max(hi, counts[m])
			}
			if hi-lo > 1 {
				t.Fatalf("unbalanced: %v", counts)
			}
			t.Logf("%v after %d leadership moves (a hand-over counts twice: release and acquire)", counts, moves)
		})
	}
}

// TestDecideGivesBackCampaignsThenTheNewest: a process over its target
// (here it counted itself alone, then saw the other member) withdraws its
// campaigns first, then gives back the shards it has led the shortest
// time; the shards it led longest stay, whatever its hash prefers.
func TestDecideGivesBackCampaignsThenTheNewest(t *testing.T) {
	const n = 8
	leaders := make([]string, n)
	since := make([]int64, n)
	for s := range leaders {
		leaders[s] = "b"
	}
	leaders[0], leaders[1] = "a", "a"
	// b leads 2..6 (led since revisions 10, 11, 40, 41, 42) and campaigns for 7
	for s, rev := range map[int]int64{2: 10, 3: 11, 4: 40, 5: 41, 6: 42} {
		since[s] = rev
	}
	p := Decide(View{Self: "b", Members: []string{"a", "b"}, Leaders: leaders, Since: since})
	// target 4 of 8: b counts 6 (five led, one campaign) and gives back 2
	if want := []int{6, 7}; !slices.Equal(slices.Sorted(slices.Values(p.Release)), want) || len(p.Acquire) != 0 {
		t.Fatalf("plan %+v, want to release %v (the campaign, then the newest leadership)", p, want)
	}
	// without Since: by preference, as before
	p = Decide(View{Self: "b", Members: []string{"a", "b"}, Leaders: leaders})
	if len(p.Release) != 2 {
		t.Fatalf("plan %+v, want 2 released", p)
	}
}
