package main

import (
	"fmt"
	"html"
	"io"
	"os"
	"strings"
)

// paperUtilization is INTELLECT-1's reported compute utilization per
// profile (blocking all-reduce), drawn beside our rows for reference.
var paperUtilization = map[string]float64{"usa": 0.957, "usa-europe": 0.856, "global": 0.830}

// modeColors gives each mode its colour in the plot, in legend order.
var modeColors = []struct{ mode, color string }{
	{"intellect-1", "#9e9e9e"}, {modeNocomm, "#4caf50"}, {modeBlocking, "#e53935"},
	{modeOverlapped, "#1e88e5"}, {modeOrder, "#8e24aa"},
}

// Plot geometry in px; the y axis runs from svgYMin to 100 %.
const (
	svgW, svgH         = 760, 400
	svgLeft, svgRight  = 60, 20
	svgTop, svgBottom  = 40, 70
	svgYMin            = 50.0
	svgBarGap, svgBarW = 4, 22
)

// writeUtilizationSVG writes the bar chart of utilization per profile and mode.
func writeUtilizationSVG(path string, rows []tableRow) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := utilizationSVG(f, rows); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// utilizationSVG draws one group of bars per profile (in first-seen order):
// INTELLECT-1's figure where known, then each measured mode.
func utilizationSVG(w io.Writer, rows []tableRow) error {
	var profiles []string
	util := map[[2]string]float64{}
	for _, r := range rows {
		if _, ok := util[[2]string{r.Profile, ""}]; !ok {
			profiles = append(profiles, r.Profile)
			util[[2]string{r.Profile, ""}] = 0
		}
		util[[2]string{r.Profile, r.Mode}] = 100 * r.Utilization
	}
	for _, p := range profiles {
		if u, ok := paperUtilization[p]; ok {
			util[[2]string{p, "intellect-1"}] = 100 * u
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", svgW, svgH)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", svgW, svgH)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14">Compute utilization on emulated WANs (sim nodes; grey: INTELLECT-1 paper)</text>`+"\n", svgLeft)
	plotH := float64(svgH - svgTop - svgBottom)
	y := func(u float64) float64 {
		u = max(svgYMin, min(100, u))
		return float64(svgTop) + plotH*(100-u)/(100-svgYMin)
	}
	for u := svgYMin; u <= 100; u += 10 {
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%.0f %%</text>`+"\n",
			svgLeft, svgW-svgRight, y(u), y(u), svgLeft-6, y(u)+4, u)
	}
	groupW := float64(svgW-svgLeft-svgRight) / float64(max(1, len(profiles)))
	for gi, p := range profiles {
		x := float64(svgLeft) + groupW*float64(gi) + 10
		for _, mc := range modeColors {
			u, ok := util[[2]string{p, mc.mode}]
			if !ok {
				continue
			}
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%d" height="%.1f" fill="%s"><title>%s %s %.2f %%</title></rect>`+"\n",
				x, y(u), svgBarW, y(svgYMin)-y(u), mc.color, html.EscapeString(p), mc.mode, u)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="9" text-anchor="middle">%.1f</text>`+"\n", x+svgBarW/2, y(u)-3, u)
			x += svgBarW + svgBarGap
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n",
			float64(svgLeft)+groupW*(float64(gi)+0.5), svgH-svgBottom+18, html.EscapeString(p))
	}
	lx := svgLeft
	for _, mc := range modeColors {
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
			lx, svgH-24, mc.color, lx+16, svgH-14, mc.mode)
		lx += 30 + 8*len(mc.mode)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
