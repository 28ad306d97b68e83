package testenv

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Hist is a Prometheus histogram read from the text of /metrics:
// cumulative counts by upper bound, summed over every text added (the
// processes of one kind). Benchmarks read the bucket that holds a
// quantile from it (Summary).
type Hist struct {
	les    []float64
	counts map[float64]float64
}

var bucketLine = regexp.MustCompile(`^(\w+)_bucket\{le="([^"]+)"\} ([0-9.e+-]+)$`)

// AddHists adds the histograms of one /metrics text to hs, by name,
// summing the counts of a histogram already there.
func AddHists(hs map[string]Hist, text string) error {
	for line := range strings.SplitSeq(text, "\n") {
		m := bucketLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		le, err1 := strconv.ParseFloat(m[2], 64)
		v, err2 := strconv.ParseFloat(m[3], 64)
		if err := errors.Join(err1, err2); err != nil {
			return fmt.Errorf("%s: %w", line, err)
		}
		h := hs[m[1]]
		if h.counts == nil {
			h.counts = map[float64]float64{}
		}
		if _, ok := h.counts[le]; !ok {
			h.les = append(h.les, le)
			slices.Sort(h.les)
		}
		h.counts[le] += v
		hs[m[1]] = h
	}
	return nil
}

// Minus is h less an earlier reading o of the same histogram: the samples
// taken between the two.
func (h Hist) Minus(o Hist) Hist {
	out := Hist{les: h.les, counts: map[float64]float64{}}
	for _, le := range h.les {
		out.counts[le] = h.counts[le] - o.counts[le]
	}
	return out
}

// Summary is the count and the bucket upper bounds (in ms: the
// histograms are of seconds) that hold the p50, p99 and p99.9.
func (h Hist) Summary() string {
	if len(h.les) == 0 {
		return "not exported"
	}
	total := h.counts[math.Inf(1)]
	if total == 0 {
		return "no samples"
	}
	at := func(q float64) string {
		for _, le := range h.les {
			if h.counts[le] >= q*total {
				if math.IsInf(le, 1) {
					return "+Inf"
				}
				return fmt.Sprintf("<=%gms", le*1000)
			}
		}
		return "?"
	}
	return fmt.Sprintf("%.0f samples; p50 %s, p99 %s, p99.9 %s", total, at(0.5), at(0.99), at(0.999))
}
