package main

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// line is one series of a plot.
type line struct {
	Label, Color string
	X, Y         []float64
	Dashed       bool
}

// plot is a hand-written SVG line chart.
type plot struct {
	Title, XLabel, YLabel string
	Lines                 []line
	XMin                  float64 // left edge; NaN: from the data
	YZero                 bool    // draw a horizontal rule at y = 0
	LogX                  bool    // a logarithmic x axis (every X > 0)
	logged                bool    // X holds log10 of the data (LogX, while drawing)
}

// logX returns p with every X replaced by its log10, for drawing.
func (p plot) logX() plot {
	q := p
	q.LogX, q.logged, q.Lines = false, true, make([]line, len(p.Lines))
	if !math.IsNaN(p.XMin) {
		q.XMin = math.Log10(p.XMin)
	}
	for i, l := range p.Lines {
		l.X = append([]float64(nil), l.X...)
		for j := range l.X {
			l.X[j] = math.Log10(l.X[j])
		}
		q.Lines[i] = l
	}
	return q
}

// xTicks returns the x axis' tick positions and labels: round values, or
// 1, 2 and 5 times the powers of ten on a logarithmic axis.
func (p plot) xTicks(x0, x1 float64) ([]float64, []string) {
	var at []float64
	var labels []string
	if !p.logged {
		for _, t := range ticks(x0, x1, 6) {
			at, labels = append(at, t), append(labels, fmtTick(t))
		}
		return at, labels
	}
	for e := math.Floor(x0); e <= x1; e++ {
		for _, m := range []float64{1, 2, 5} {
			if t := e + math.Log10(m); t >= x0 && t <= x1 {
				at, labels = append(at, t), append(labels, fmtTick(math.Pow(10, t)))
			}
		}
	}
	return at, labels
}

// Plot geometry, in SVG user units.
const (
	svgW                         = 760
	padL, padR, padT             = 70, 20, 40
	plotW, plotH                 = svgW - padL - padR, 290
	legendRowH, legendX, legendY = 18, padL, padT + plotH + 62 // one legend row per line below the x label
)

// bounds returns the data range of the plot, padded by 5 % vertically.
func (p plot) bounds() (x0, x1, y0, y1 float64) {
	x0, x1, y0, y1 = math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, l := range p.Lines {
		for i := range l.X {
			if !math.IsNaN(p.XMin) && l.X[i] < p.XMin {
				continue
			}
			x0, x1 = min(x0, l.X[i]), max(x1, l.X[i])
			y0, y1 = min(y0, l.Y[i]), max(y1, l.Y[i])
		}
	}
	if math.IsInf(x0, 0) { // no data
		return 0, 1, 0, 1
	}
	if p.YZero {
		y0, y1 = min(y0, 0), max(y1, 0)
	}
	if x1 == x0 {
		x1 = x0 + 1
	}
	pad := (y1 - y0) * 0.05
	if pad == 0 {
		pad = math.Max(math.Abs(y0)*0.05, 1e-3)
	}
	return x0, x1, y0 - pad, y1 + pad
}

// ticks returns about n round values covering [lo, hi].
func ticks(lo, hi float64, n int) []float64 {
	if !(hi > lo) || n < 1 {
		return []float64{lo}
	}
	raw := (hi - lo) / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var out []float64
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		out = append(out, v)
	}
	return out
}

// fmtTick formats an axis value compactly (1.5M, 250k, 2.25).
func fmtTick(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e6:
		return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", v/1e6), "0"), ".") + "M"
	case a >= 1e4:
		return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.1f", v/1e3), "0"), ".") + "k"
	case a == 0:
		return "0"
	default:
		return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", v), "0"), ".")
	}
}

// writeSVG renders p.
func (p plot) writeSVG(w io.Writer) error {
	if p.LogX {
		p = p.logX()
	}
	x0, x1, y0, y1 := p.bounds()
	sx := func(x float64) float64 { return padL + (x-x0)/(x1-x0)*plotW }
	sy := func(y float64) float64 { return padT + (1-(y-y0)/(y1-y0))*plotH }
	svgH := legendY + len(p.Lines)*legendRowH
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", svgW, svgH, svgW, svgH)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", svgW, svgH)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", padL, html.EscapeString(p.Title))
	xt, xl := p.xTicks(x0, x1)
	for i, t := range xt {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e5e5e5"/><text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n",
			sx(t), padT, sx(t), padT+plotH, sx(t), padT+plotH+16, xl[i])
	}
	for _, t := range ticks(y0, y1, 6) {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e5e5e5"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n",
			padL, sy(t), padL+plotW, sy(t), padL-6, sy(t)+4, fmtTick(t))
	}
	if p.YZero && y0 < 0 && y1 > 0 {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#888"/>`+"\n", padL, sy(0), padL+plotW, sy(0))
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#444"/>`+"\n", padL, padT, plotW, plotH)
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", padL+plotW/2, padT+plotH+36, html.EscapeString(p.XLabel))
	fmt.Fprintf(&b, `<text transform="translate(18,%d) rotate(-90)" text-anchor="middle">%s</text>`+"\n", padT+plotH/2, html.EscapeString(p.YLabel))
	for i, l := range p.Lines {
		p.writeLine(&b, l, sx, sy)
		ly, lx := legendY+i*legendRowH, legendX
		dash := ""
		if l.Dashed {
			dash = ` stroke-dasharray="6 4"`
		}
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/><text x="%d" y="%d">%s</text>`+"\n",
			lx, ly-4, lx+24, ly-4, l.Color, dash, lx+30, ly, html.EscapeString(l.Label))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// writeLine draws one series as a polyline with a dot per point.
func (p plot) writeLine(b *strings.Builder, l line, sx, sy func(float64) float64) {
	var pts []string
	for i := range l.X {
		if !math.IsNaN(p.XMin) && l.X[i] < p.XMin {
			continue
		}
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", sx(l.X[i]), sy(l.Y[i])))
	}
	dash := ""
	if l.Dashed {
		dash = ` stroke-dasharray="6 4"`
	}
	fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.8"%s points="%s"/>`+"\n", l.Color, dash, strings.Join(pts, " "))
	for _, pt := range pts {
		x, y, _ := strings.Cut(pt, ",")
		fmt.Fprintf(b, `<circle cx="%s" cy="%s" r="2" fill="%s"/>`+"\n", x, y, l.Color)
	}
}
