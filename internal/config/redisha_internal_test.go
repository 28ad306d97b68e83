package config

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
)

// value is c's count.
func value(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

func TestFollowFailover(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{redis.Nil, false},
		{redis.ErrCrossSlot, false},
		{redis.ErrClosed, false},
		{context.Canceled, false},
		{refused, true},
		{&ConnError{Service: "redis", Addr: "a:1", Err: refused}, true},
		{io.EOF, true},
		{context.DeadlineExceeded, true},
		{fmt.Errorf("settle: %w", syscall.ECONNRESET), true},
	} {
		if got := followFailover(tc.err); got != tc.want {
			t.Errorf("followFailover(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func slots(ranges ...any) []redis.ClusterSlot {
	var out []redis.ClusterSlot
	for i := 0; i < len(ranges); i += 3 {
		s := redis.ClusterSlot{Start: ranges[i].(int), End: ranges[i+1].(int)}
		for _, a := range strings.Fields(ranges[i+2].(string)) {
			s.Nodes = append(s.Nodes, redis.ClusterNode{Addr: a})
		}
		out = append(out, s)
	}
	return out
}

// A slot range taken over by its replica is one failover, however often
// the old and new maps are read afterwards (a node that had not heard of
// it yet); a range moved to another master is a migration.
func TestSlotMapFailoverOnce(t *testing.T) {
	logs := new(strings.Builder)
	h := newRedisHA(slog.New(slog.NewTextHandler(logs, nil)), false)
	before := slots(0, 100, "A B", 101, 200, "C D")
	after := slots(0, 100, "B", 101, 200, "C D")
	for _, m := range [][]redis.ClusterSlot{before, before, after, before, after, after} {
		h.slotMap(m)
	}
	if got := value(h.failovers); got != 1 {
		t.Fatalf("failovers %v, want 1; log:\n%s", got, logs)
	}
	if n := strings.Count(logs.String(), "redis failover followed"); n != 1 || !strings.Contains(logs.String(), "old=A new=B slots=0-100") {
		t.Fatalf("log:\n%s", logs)
	}
	h.slotMap(slots(0, 50, "B", 51, 100, "C D", 101, 200, "C D"))
	if got := value(h.failovers); got != 1 {
		t.Fatalf("a slot migration counted as a failover: %v", got)
	}
	if got := value(h.reloads); got != 7 {
		t.Fatalf("reloads %v, want 7", got)
	}
}

// One address: a READONLY episode counts once, until a connection reaches
// another address. Sentinel: a new primary dialled counts, but not again
// when READONLY announced it.
func TestPrimaryChanges(t *testing.T) {
	one := newRedisHA(slog.New(slog.DiscardHandler), false)
	one.dialed("a")
	one.readOnly()
	one.readOnly()
	one.dialed("a")
	one.readOnly()
	if got := value(one.failovers); got != 1 {
		t.Fatalf("one address, one demotion: %v failovers", got)
	}
	one.dialed("b")
	one.dialed("c") // a name resolving elsewhere is no failover by itself
	one.readOnly()
	if got := value(one.failovers); got != 2 {
		t.Fatalf("one address, a second demotion elsewhere: %v failovers, want 2", got)
	}

	sent := newRedisHA(slog.New(slog.DiscardHandler), true)
	sent.dialed("a")
	sent.dialed("a")
	sent.dialed("b")
	if got := value(sent.failovers); got != 1 {
		t.Fatalf("Sentinel, one switch: %v failovers", got)
	}
	sent.readOnly()
	sent.readOnly()
	sent.dialed("c")
	if got := value(sent.failovers); got != 2 {
		t.Fatalf("Sentinel, a demotion then its new primary: %v failovers, want 2", got)
	}
}
