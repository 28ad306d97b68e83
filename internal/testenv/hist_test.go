package testenv

import (
	"strconv"
	"testing"
)

func TestHists(t *testing.T) {
	text := func(a, b, inf int) string {
		return "# TYPE x_seconds histogram\n" +
			`x_seconds_bucket{le="0.001"} ` + strconv.Itoa(a) + "\n" +
			`x_seconds_bucket{le="0.005"} ` + strconv.Itoa(b) + "\n" +
			`x_seconds_bucket{le="+Inf"} ` + strconv.Itoa(inf) + "\n" +
			"x_seconds_sum 1\nx_seconds_count " + strconv.Itoa(inf) + "\n"
	}
	before := map[string]Hist{}
	if err := AddHists(before, text(10, 10, 10)); err != nil {
		t.Fatal(err)
	}
	after := map[string]Hist{}
	// two processes, summed, less the earlier reading: 200 samples, 100
	// of them under 1 ms, 198 under 5 ms
	for _, s := range []string{text(70, 100, 100), text(40, 108, 110)} {
		if err := AddHists(after, s); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := after["x_seconds"].Minus(before["x_seconds"]).Summary(), "200 samples; p50 <=1ms, p99 <=5ms, p99.9 +Inf"; got != want {
		t.Errorf("Summary %q, want %q", got, want)
	}
	if got := after["y"].Summary(); got != "not exported" {
		t.Errorf("a missing histogram: %q", got)
	}
}
