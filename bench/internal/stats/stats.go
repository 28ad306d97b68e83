// Package stats summarises latency samples: quantiles by the nearest-rank
// method, the share of negative samples (a task that fired early) and a
// down-sampled CDF for charts and the JSON file.
package stats

import (
	"math"
	"slices"
	"time"
)

// Summary is the distribution of a set of durations.
type Summary struct {
	N          int     `json:"n"`
	P50ms      float64 `json:"p50_ms"`
	P99ms      float64 `json:"p99_ms"`
	P999ms     float64 `json:"p999_ms"`
	MaxMs      float64 `json:"max_ms"`
	MinMs      float64 `json:"min_ms"`
	MeanMs     float64 `json:"mean_ms"`
	EarlyShare float64 `json:"early_share"` // samples < 0 (fired before due)
	EarlyMaxMs float64 `json:"early_max_ms"`
}

// Summarize computes the summary of ds (which it does not modify).
func Summarize(ds []time.Duration) Summary {
	s := Sorted(ds)
	out := Summary{N: len(s)}
	if len(s) == 0 {
		return out
	}
	var sum float64
	var early int
	for _, d := range s {
		sum += ms(d)
		if d < 0 {
			early++
		}
	}
	out.P50ms = ms(Quantile(s, 0.50))
	out.P99ms = ms(Quantile(s, 0.99))
	out.P999ms = ms(Quantile(s, 0.999))
	out.MaxMs = ms(s[len(s)-1])
	out.MinMs = ms(s[0])
	out.MeanMs = sum / float64(len(s))
	out.EarlyShare = float64(early) / float64(len(s))
	if early > 0 {
		out.EarlyMaxMs = -ms(s[0])
	}
	return out
}

// Sorted returns a sorted copy of ds.
func Sorted(ds []time.Duration) []time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s
}

// Quantile is the nearest-rank q-quantile of sorted samples: the smallest
// sample with at least q of the samples at or below it.
func Quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Point is one point of a CDF: the share of samples at or below Ms.
type Point struct {
	Ms    float64 `json:"ms"`
	Share float64 `json:"share"`
}

// CDF returns at most n points of the empirical CDF of sorted samples,
// evenly spaced in rank, always including the last sample.
func CDF(sorted []time.Duration, n int) []Point {
	if len(sorted) == 0 || n < 1 {
		return nil
	}
	step := max(1, len(sorted)/n)
	pts := make([]Point, 0, n+1)
	for i := step - 1; i < len(sorted); i += step {
		pts = append(pts, Point{Ms: ms(sorted[i]), Share: float64(i+1) / float64(len(sorted))})
	}
	if last := len(sorted) - 1; pts[len(pts)-1].Share < 1 {
		pts = append(pts, Point{Ms: ms(sorted[last]), Share: 1})
	}
	return pts
}
