package engine

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestOffsetsCommitPoint(t *testing.T) {
	type step struct {
		op  string // s start, d done, c mark the pending commits committed
		off int64
	}
	for _, c := range []struct {
		name  string
		steps []step
		want  int64 // pending commit point; -1: nothing pending
	}{
		{"nothing fetched", nil, -1},
		{"one running", []step{{"s", 0}}, -1},
		{"one done", []step{{"s", 0}, {"d", 0}}, 1},
		{"prefix done", []step{{"s", 0}, {"s", 1}, {"s", 2}, {"d", 0}, {"d", 1}}, 2},
		{"hole blocks", []step{{"s", 0}, {"s", 1}, {"s", 2}, {"d", 1}, {"d", 2}}, -1},
		{"hole fills", []step{{"s", 0}, {"s", 1}, {"s", 2}, {"d", 1}, {"d", 2}, {"d", 0}}, 3},
		{"gaps in offsets", []step{{"s", 10}, {"s", 13}, {"s", 20}, {"d", 10}, {"d", 13}}, 20},
		{"start mid-partition", []step{{"s", 500}, {"d", 500}}, 501},
		{"already committed", []step{{"s", 0}, {"d", 0}, {"c", 0}}, -1},
		{"moves after commit", []step{{"s", 0}, {"d", 0}, {"c", 0}, {"s", 1}, {"d", 1}}, 2},
		{"refetched copy runs", []step{{"s", 0}, {"s", 1}, {"d", 0}, {"s", 0}}, -1},
		{"both copies must finish", []step{{"s", 3}, {"d", 3}, {"c", 0}, {"s", 4}, {"s", 4}, {"d", 4}}, -1},
		{"both copies finished", []step{{"s", 4}, {"s", 4}, {"d", 4}, {"d", 4}}, 5},
		{"rewind never goes back", []step{{"s", 0}, {"s", 1}, {"d", 0}, {"d", 1}, {"c", 0}, {"s", 1}}, -1},
		{"done of unknown offset", []step{{"s", 0}, {"d", 7}}, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := newOffsets()
			for _, s := range c.steps {
				switch s.op {
				case "s":
					o.start("t", 0, s.off)
				case "d":
					o.done("t", 0, s.off)
				case "c":
					o.markCommitted(o.pending())
				}
			}
			got := int64(-1)
			if p := o.pending(); len(p) == 1 {
				got = p[0].offset
			} else if len(p) > 1 {
				t.Fatalf("pending %v", p)
			}
			if got != c.want {
				t.Errorf("commit point %d, want %d", got, c.want)
			}
		})
	}
}

func TestOffsetsPartitionsIndependent(t *testing.T) {
	o := newOffsets()
	o.start("a", 0, 0)
	o.start("a", 1, 0)
	o.start("b", 0, 5)
	o.done("a", 1, 0)
	o.done("b", 0, 5)
	got := o.pending()
	want := []commit{{"a", 1, 1}, {"b", 0, 6}}
	if !slices.Equal(got, want) {
		t.Errorf("pending %v, want %v", got, want)
	}
	if o.running() != 1 {
		t.Errorf("running %d", o.running())
	}
}

// checkOffsets drives the tracker with a random schedule of fetches (in
// order, with rewinds that re-fetch from an earlier offset, as after a
// rebalance), completions in any order, and commits, and checks against a
// model: a committed point never passes a fetched record that has not
// finished, and once everything finished the point reaches the end.
func checkOffsets(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	o := newOffsets()
	type copyRun struct{ off int64 }
	var running []copyRun
	unfinished := map[int64]int{} // offset -> running copies
	next := int64(rng.IntN(3))    // next offset the "reader" returns
	highest := int64(-1)
	committed := int64(-1)
	for range steps {
		switch r := rng.IntN(10); {
		case r < 4: // fetch
			o.start("t", 0, next)
			running = append(running, copyRun{next})
			unfinished[next]++
			highest = max(highest, next)
			next += 1 + int64(rng.IntN(2)) // sometimes a gap
		case r < 7 && len(running) > 0: // finish a random one
			i := rng.IntN(len(running))
			off := running[i].off
			running = slices.Delete(running, i, i+1)
			o.done("t", 0, off)
			if unfinished[off]--; unfinished[off] == 0 {
				delete(unfinished, off)
			}
		case r < 9: // commit
			p := o.pending()
			for _, c := range p {
				for off := range unfinished {
					if off < c.offset {
						t.Fatalf("seed %d: commit to %d while %d runs", seed, c.offset, off)
					}
				}
				if c.offset <= committed {
					t.Fatalf("seed %d: commit %d not past %d", seed, c.offset, committed)
				}
				if c.offset > highest+1 {
					t.Fatalf("seed %d: commit %d past the highest fetched %d", seed, c.offset, highest)
				}
				committed = c.offset
			}
			o.markCommitted(p)
		default: // rewind: the reader restarts from an earlier point
			if highest >= 0 {
				next = max(0, highest-int64(rng.IntN(5)))
			}
		}
	}
	for _, r := range running {
		o.done("t", 0, r.off)
	}
	p := o.pending()
	if highest >= 0 && highest+1 > committed && (len(p) != 1 || p[0].offset != highest+1) {
		t.Fatalf("seed %d: all finished, pending %v, want %d (committed %d)", seed, p, highest+1, committed)
	}
}

func TestOffsetsProperty(t *testing.T) {
	for seed := range uint64(500) {
		checkOffsets(t, seed, 400)
	}
}

func FuzzOffsets(f *testing.F) {
	f.Add(uint64(1), uint16(100))
	f.Add(uint64(42), uint16(1000))
	f.Fuzz(func(t *testing.T, seed uint64, steps uint16) {
		checkOffsets(t, seed, int(steps%2000))
	})
}
