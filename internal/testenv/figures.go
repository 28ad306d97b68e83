package testenv

import (
	"slices"
	"strconv"
	"strings"
)

// Median is the median of xs (the mean of the middle two for an even
// count), for benchmarks that print the spread of their rounds.
func Median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	m := len(s) / 2
	if len(s)%2 == 0 {
		return (s[m-1] + s[m]) / 2
	}
	return s[m]
}

// JoinFloats lists xs with prec decimals, comma-separated.
func JoinFloats(xs []float64, prec int) string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = strconv.FormatFloat(x, 'f', prec, 64)
	}
	return strings.Join(out, ", ")
}
