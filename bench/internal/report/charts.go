package report

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/delayq/delayq/bench/internal/stats"
)

// floorMs is where lags at or below it (early firings included) sit on the
// log axis of the CDF charts.
const floorMs = 0.1

var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
}

// Curve is one system's lag distribution.
type Curve struct {
	Name  string
	CDF   []stats.Point
	Early float64 // share fired early
}

// WriteCharts writes throughput.<ext>, lag_cdf_<rate>.<ext>,
// lag_cdf_spike.<ext> and handling.<ext> into dir; ext is "svg" or "png".
func WriteCharts(dir, ext string, r *Results) error {
	if ext != "svg" && ext != "png" {
		return fmt.Errorf("chart format %q: svg or png", ext)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := throughputChart(filepath.Join(dir, "throughput."+ext), r); err != nil {
		return err
	}
	for _, rate := range r.Rates() {
		var cs []Curve
		for _, l := range r.Steady {
			if l.Rate == rate {
				cs = append(cs, Curve{Name: l.System + " " + l.Config, CDF: l.CDF, Early: l.Lag.EarlyShare})
			}
		}
		title := fmt.Sprintf("Firing lag CDF, steady %d tasks/s", rate)
		if err := lagCDFChart(filepath.Join(dir, fmt.Sprintf("lag_cdf_%d.%s", rate, ext)), title, cs); err != nil {
			return err
		}
	}
	if err := handlingChart(filepath.Join(dir, "handling."+ext), r); err != nil {
		return err
	}
	var cs []Curve
	for _, s := range r.Spike {
		cs = append(cs, Curve{Name: s.System + " " + s.Config, CDF: s.CDF, Early: s.Lag.EarlyShare})
	}
	if len(cs) > 0 {
		title := fmt.Sprintf("Lag CDF, spike of %d tasks due at once", r.Spike[0].Tasks)
		if err := lagCDFChart(filepath.Join(dir, "lag_cdf_spike."+ext), title, cs); err != nil {
			return err
		}
	}
	return nil
}

// lagCDFChart plots P(lag <= x) on a log x axis. Lags at or below floorMs,
// early ones included, are drawn at floorMs: the curve starts at the share
// of such tasks, and the legend gives the share fired early.
func lagCDFChart(file, title string, curves []Curve) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = fmt.Sprintf("lag (ms, log scale; <= %g ms and early drawn at %g)", floorMs, floorMs)
	p.Y.Label.Text = "share of tasks visible"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top = false
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	maxX := 1.0
	for i, c := range curves {
		if len(c.CDF) == 0 {
			continue
		}
		pts := make(plotter.XYs, 0, len(c.CDF)+1)
		pts = append(pts, plotter.XY{X: floorMs, Y: 0})
		for _, q := range c.CDF {
			x := math.Max(q.Ms, floorMs)
			pts = append(pts, plotter.XY{X: x, Y: q.Share})
			maxX = math.Max(maxX, x)
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = palette[i%len(palette)]
		l.Width = vg.Points(1.5)
		p.Add(l)
		name := c.Name
		if c.Early > 0 {
			name += fmt.Sprintf(" (%.1f%% early)", 100*c.Early)
		}
		p.Legend.Add(name, l)
	}
	p.X.Min, p.X.Max = floorMs, maxX*1.5
	return p.Save(8*vg.Inch, 4.5*vg.Inch, file)
}

func throughputChart(file string, r *Results) error {
	var bars []bar
	for _, t := range r.Throughput {
		bars = append(bars, bar{Label: t.Label, System: t.System, Value: t.TasksPerSec})
	}
	return barChart(file, "Schedule throughput (tasks/s, higher is better)", "tasks/s", bars)
}

// handlingChart draws delayq's and asynq's handling rows; the raw
// kafka-go rate, an order of magnitude above, is in the title instead.
func handlingChart(file string, r *Results) error {
	var bars []bar
	title := "No-op handler, one consumer (tasks/s, higher is better)"
	for _, h := range r.Handling {
		if h.Label == LabelHandleRaw {
			title += fmt.Sprintf("\n(a bare kafka-go Reader reads the same records at %s/s)", commas(int64(math.Round(h.TasksPerSec))))
			continue
		}
		bars = append(bars, bar{Label: h.Label, System: h.System, Value: h.TasksPerSec})
	}
	return barChart(file, title, "tasks/s", bars)
}

// bar is one bar of a barChart: its x label, the system (one colour and
// legend entry per system, in order of appearance) and its height.
type bar struct {
	Label, System string
	Value         float64
}

// barChart draws one bar per entry, coloured by system; nothing without
// entries.
func barChart(file, title, yLabel string, bars []bar) error {
	if len(bars) == 0 {
		return nil
	}
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = yLabel
	p.Add(plotter.NewGrid())
	var systems, names []string
	for _, b := range bars {
		names = append(names, b.Label)
		if !containsString(systems, b.System) {
			systems = append(systems, b.System)
		}
	}
	w := vg.Points(28)
	for i, sys := range systems {
		vals := make(plotter.Values, len(bars))
		for j, b := range bars {
			if b.System == sys {
				vals[j] = b.Value
			}
		}
		bc, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return err
		}
		bc.Color = systemColor(sys, i)
		bc.LineStyle.Width = 0
		p.Add(bc)
		p.Legend.Add(sys, bc)
	}
	p.Legend.Top = true
	p.NominalX(names...)
	p.Y.Min = 0
	for _, b := range bars {
		p.Y.Max = math.Max(p.Y.Max, 1.15*b.Value) // room for the legend
	}
	p.Y.Tick.Marker = intTicks{}
	return p.Save(8*vg.Inch, 4*vg.Inch, file)
}

// systemColor keeps delayq's and asynq's colours the same on every chart;
// other systems take the remaining ones.
func systemColor(system string, i int) color.Color {
	switch system {
	case DelayQ:
		return palette[0]
	case Asynq:
		return palette[1]
	}
	return palette[2+i%(len(palette)-2)]
}

func containsString(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// intTicks are the default ticks labelled as whole numbers with
// thousands separators.
type intTicks struct{}

func (intTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = commas(int64(math.Round(ts[i].Value)))
		}
	}
	return ts
}
