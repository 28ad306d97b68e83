package report

import (
	"fmt"
	"slices"
	"strings"
)

// SingleTarget is one single-task comparison of issue 46 and its bar:
// delayq's row over asynq's, in tasks/s, in the same round.
type SingleTarget struct {
	Name     string
	DQ, AQ   string // row labels
	AtLeast  float64
	Measured []float64 // the ratio of each round that has both rows, in order
}

// singleTargets are the single-task bars (issue 46): the embedded producer
// from 16 callers at least asynq's Enqueue from 16, the Go client over
// HTTP at least 0.6 of it, and the embedded producer from 64 callers 1.5x
// asynq's from 64.
func singleTargets() []SingleTarget {
	return []SingleTarget{
		{Name: "embedded.Producer ×16 / asynq ×16", DQ: LabelDQEmbeddedSingle, AQ: LabelAQEnqueue16, AtLeast: 1.0},
		{Name: "Go client ×16 / asynq ×16", DQ: LabelDQClientSingle, AQ: LabelAQEnqueue16, AtLeast: 0.6},
		{Name: "embedded.Producer ×64 / asynq ×64", DQ: LabelDQEmbeddedWide, AQ: LabelAQEnqueue64, AtLeast: 1.5},
	}
}

// SingleRatios is each single-task bar with its ratio in every round:
// round 1 from Throughput, the others from Rounds. A ratio is taken only
// within a round, so that the machine's drift over a run (a 2-vCPU VM
// drifts by a quarter within minutes) moves both rows of it alike.
func (r *Results) SingleRatios() []SingleTarget {
	rounds := [][]Throughput{r.Throughput}
	for _, rd := range r.Rounds {
		rounds = append(rounds, rd.Rows)
	}
	ts := singleTargets()
	for i := range ts {
		for _, rows := range rounds {
			dq, aq := rowOf(rows, ts[i].DQ), rowOf(rows, ts[i].AQ)
			if dq != nil && aq != nil && aq.TasksPerSec > 0 {
				ts[i].Measured = append(ts[i].Measured, dq.TasksPerSec/aq.TasksPerSec)
			}
		}
	}
	return ts
}

// rowOf is the row of rows with label, nil if none.
func rowOf(rows []Throughput, label string) *Throughput {
	for i := range rows {
		if rows[i].Label == label {
			return &rows[i]
		}
	}
	return nil
}

// Median is the median of the measured ratios (0 if none).
func (t SingleTarget) Median() float64 {
	if len(t.Measured) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(t.Measured))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Met is the number of rounds whose ratio reaches the bar.
func (t SingleTarget) Met() int {
	n := 0
	for _, x := range t.Measured {
		if x >= t.AtLeast {
			n++
		}
	}
	return n
}

// Summary is one line: the median, the range and each round's ratio, and
// how many rounds reach the bar.
func (t SingleTarget) Summary() string {
	if len(t.Measured) == 0 {
		return t.Name + ": not measured"
	}
	return fmt.Sprintf("%s: median %.2fx, %.2f-%.2fx over %d round(s) (%s); the bar is %.1fx: reached in %d of %d",
		t.Name, t.Median(), slices.Min(t.Measured), slices.Max(t.Measured), len(t.Measured), t.Each(), t.AtLeast, t.Met(), len(t.Measured))
}

// Each is every round's ratio, in order, two decimals each.
func (t SingleTarget) Each() string {
	each := make([]string, len(t.Measured))
	for i, x := range t.Measured {
		each[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(each, ", ")
}
