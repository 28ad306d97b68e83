package event

import (
	"os"
	"testing"

	"github.com/delayq/delayq/internal/worked"
)

// BenchmarkFire's fire path (issue #41): without DQ_BENCH_WORKED the
// topics it fires to are worked by no work process, so every task ends
// delivered at settle (a receipt of kind 'd', the take's lease kept as
// its purge list, a "delivered" outcome record); DQ_BENCH_WORKED=1
// declares them worked first (worked.Declare), so the settle stores the
// receipts alone.
func benchWorked() bool { return os.Getenv("DQ_BENCH_WORKED") == "1" }

// benchFirePath names the fire path BenchmarkFire measures.
func benchFirePath() string {
	if benchWorked() {
		return "worked topics (DQ_BENCH_WORKED=1): receipts only"
	}
	return "topics no work process handles: every task ends delivered (DQ_BENCH_WORKED=1 for worked topics)"
}

// benchDeclare declares topic worked when DQ_BENCH_WORKED=1 (before the
// event process starts, so that its first list has it).
func benchDeclare(b *testing.B, w *world, topic string) {
	b.Helper()
	if !benchWorked() {
		return
	}
	if _, err := worked.Declare(b.Context(), w.ec, w.ns, topic, "bench", "bench"); err != nil {
		b.Fatal(err)
	}
}

// benchSettled reads what an app's settles stored: receipts, delivered
// tasks, and the outcome records published and dropped.
func benchSettled(b *testing.B, a *app) (receipts, delivered, published, dropped float64) {
	b.Helper()
	return metric(b, a.Addr(), "delayq_fire_receipts_total"), metric(b, a.Addr(), "delayq_fire_delivered_total"),
		metric(b, a.Addr(), "delayq_outcomes_published_total"), metric(b, a.Addr(), "delayq_outcomes_dropped_total")
}
