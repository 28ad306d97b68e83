package engine

import (
	"sort"
	"sync"
)

// offsets tracks, per topic partition, which fetched records are still
// running, and says how far each partition may be committed: up to the
// lowest offset still running, or past the highest offset fetched when none
// is. Everything below that point was fetched by this worker and finished
// (or was committed by someone before this worker started reading there),
// so a commit never skips a record that has not finished.
//
// Offsets need not be contiguous (transaction markers and compaction leave
// gaps), and the same offset may be fetched twice: after a rebalance the
// reader starts again from the group's committed offset. Duplicates are
// counted.
type offsets struct {
	mu    sync.Mutex
	parts map[partKey]*partState
}

type partKey struct {
	topic     string
	partition int
}

type partState struct {
	running   map[int64]int // offset -> how many fetched copies are running
	highest   int64         // highest offset fetched; -1 before the first
	committed int64         // the offset last committed (next to read); -1 before the first
}

func newOffsets() *offsets {
	return &offsets{parts: map[partKey]*partState{}}
}

func (o *offsets) part(k partKey) *partState {
	p := o.parts[k]
	if p == nil {
		p = &partState{running: map[int64]int{}, highest: -1, committed: -1}
		o.parts[k] = p
	}
	return p
}

// start records that a fetched record began running.
func (o *offsets) start(topic string, partition int, offset int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	p := o.part(partKey{topic, partition})
	p.running[offset]++
	if offset > p.highest {
		p.highest = offset
	}
}

// done records that a record finished (its outcome is stored). A record that
// never finishes (abandoned at shutdown) keeps its partition from being
// committed past it.
func (o *offsets) done(topic string, partition int, offset int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	p := o.parts[partKey{topic, partition}]
	if p == nil {
		return
	}
	switch n := p.running[offset]; n {
	case 0:
	case 1:
		delete(p.running, offset)
	default:
		p.running[offset] = n - 1
	}
}

// commitPoint is the offset a partition may be committed to: the next
// offset to read, below which everything finished.
func (p *partState) commitPoint() int64 {
	if len(p.running) == 0 {
		return p.highest + 1
	}
	low := int64(-1)
	for off := range p.running {
		if low < 0 || off < low {
			low = off
		}
	}
	return low
}

// commit is one partition's new commit point.
type commit struct {
	topic     string
	partition int
	offset    int64 // next offset to read
}

// pending lists the partitions whose commit point moved past what was last
// committed, in a stable order.
func (o *offsets) pending() []commit {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []commit
	for k, p := range o.parts {
		if c := p.commitPoint(); c > p.committed && c > 0 {
			out = append(out, commit{k.topic, k.partition, c})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].topic != out[j].topic {
			return out[i].topic < out[j].topic
		}
		return out[i].partition < out[j].partition
	})
	return out
}

// committed records that commits were accepted by the broker.
func (o *offsets) markCommitted(cs []commit) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, c := range cs {
		p := o.part(partKey{c.topic, c.partition})
		if c.offset > p.committed {
			p.committed = c.offset
		}
	}
}

// running is the number of records running.
func (o *offsets) running() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, p := range o.parts {
		for _, c := range p.running {
			n += c
		}
	}
	return n
}
