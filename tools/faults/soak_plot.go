package faults

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"strings"
)

// The soak's plot: resident set (MiB) and goroutines of each stage per round, one panel each,
// faults marked as grey verticals. Drawn with the standard library alone (image/png and a
// 3×5 font for the labels), so the soak needs no plotting dependency.

var plotColors = map[string]color.RGBA{
	stageScanner: {0x1f, 0x77, 0xb4, 0xff},
	stageProber:  {0xff, 0x7f, 0x0e, 0xff},
	stageDeleter: {0x2c, 0xa0, 0x2c, 0xff},
	stageWalker:  {0xd6, 0x27, 0x28, 0xff},
	stageSweeper: {0x94, 0x67, 0xbd, 0xff},
}

// canvas is an RGBA image with drawing helpers.
type canvas struct{ *image.RGBA }

func (c canvas) dot(x, y int, col color.RGBA, size int) {
	for dx := 0; dx < size; dx++ {
		for dy := 0; dy < size; dy++ {
			if image.Pt(x+dx, y+dy).In(c.Bounds()) {
				c.SetRGBA(x+dx, y+dy, col)
			}
		}
	}
}

// line draws a line of width 2.
func (c canvas) line(x0, y0, x1, y1 int, col color.RGBA) {
	dx, dy := x1-x0, y1-y0
	n := max(abs(dx), abs(dy), 1)
	for i := 0; i <= n; i++ {
		c.dot(x0+dx*i/n, y0+dy*i/n, col, 2)
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// font3x5 holds the glyphs of the labels: rows of 3 bits, top to bottom.
var font3x5 = map[rune][5]uint8{
	'0': {7, 5, 5, 5, 7}, '1': {2, 6, 2, 2, 7}, '2': {7, 1, 7, 4, 7}, '3': {7, 1, 7, 1, 7}, '4': {5, 5, 7, 1, 1},
	'5': {7, 4, 7, 1, 7}, '6': {7, 4, 7, 5, 7}, '7': {7, 1, 1, 1, 1}, '8': {7, 5, 7, 5, 7}, '9': {7, 5, 7, 1, 7},
	'a': {2, 5, 7, 5, 5}, 'b': {6, 5, 6, 5, 6}, 'c': {7, 4, 4, 4, 7}, 'd': {6, 5, 5, 5, 6}, 'e': {7, 4, 6, 4, 7},
	'f': {7, 4, 6, 4, 4}, 'g': {7, 4, 5, 5, 7}, 'h': {5, 5, 7, 5, 5}, 'i': {7, 2, 2, 2, 7}, 'k': {5, 5, 6, 5, 5},
	'l': {4, 4, 4, 4, 7}, 'm': {5, 7, 7, 5, 5}, 'n': {6, 5, 5, 5, 5}, 'o': {7, 5, 5, 5, 7}, 'p': {7, 5, 7, 4, 4},
	'r': {6, 5, 6, 5, 5}, 's': {7, 4, 7, 1, 7}, 't': {7, 2, 2, 2, 2}, 'u': {5, 5, 5, 5, 7}, 'w': {5, 5, 7, 7, 5},
	'y': {5, 5, 7, 2, 2}, 'x': {5, 5, 2, 5, 5}, '/': {1, 1, 2, 4, 4}, '-': {0, 0, 7, 0, 0}, '.': {0, 0, 0, 0, 2},
	'(': {1, 2, 2, 2, 1}, ')': {4, 2, 2, 2, 4}, ':': {0, 2, 0, 2, 0}, 'v': {5, 5, 5, 5, 2}, 'q': {7, 5, 5, 7, 1},
	'j': {1, 1, 1, 5, 7}, 'z': {7, 1, 2, 4, 7},
}

// text writes s (lower case) at x, y, each font pixel scale×scale.
func (c canvas) text(x, y int, s string, col color.RGBA, scale int) {
	for _, r := range strings.ToLower(s) {
		if g, ok := font3x5[r]; ok {
			for row, bits := range g {
				for b := 0; b < 3; b++ {
					if bits&(4>>b) != 0 {
						c.dot(x+b*scale, y+row*scale, col, scale)
					}
				}
			}
		}
		x += 4 * scale
	}
}

// writeSoakPlot draws the run's plot to path.
func writeSoakPlot(path string, res SoakResult) error {
	const w, panelH, margin = 960, 300, 60
	h := 2*panelH + 3*margin
	c := canvas{image.NewRGBA(image.Rect(0, 0, w, h))}
	white := color.RGBA{0xff, 0xff, 0xff, 0xff}
	for x := 0; x < w; x++ {
		for y := 0; y < h; y++ {
			c.SetRGBA(x, y, white)
		}
	}
	black, grey := color.RGBA{0x20, 0x20, 0x20, 0xff}, color.RGBA{0xc8, 0xc8, 0xc8, 0xff}
	faultCol := color.RGBA{0xf0, 0x90, 0x90, 0xff}
	c.text(margin, 12, fmt.Sprintf("kvcm-gc soak %s seed %d", strings.ReplaceAll(res.Run.String(), "/", " "), res.Seed), black, 3)
	x := margin
	for _, st := range soakStages {
		c.dot(x, 40, plotColors[st], 10)
		c.text(x+14, 41, st, black, 2)
		x += 14 + 8*len(st) + 24
	}
	panels := []struct {
		title, metric string
		scale         float64
	}{{"rss (mib)", "rss", 1 << 20}, {"goroutines", "goroutines", 1}}
	for i, p := range panels {
		top := margin + i*(panelH+margin) + 20
		drawPanel(c, res, margin, top, w-2*margin, panelH-20, p.title, p.metric, p.scale, black, grey, faultCol)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("soak plot: %w", err)
	}
	if err := png.Encode(f, c); err != nil {
		_ = f.Close()
		return fmt.Errorf("soak plot: %w", err)
	}
	return f.Close()
}

func drawPanel(c canvas, res SoakResult, left, top, pw, ph int, title, metric string, scale float64, black, grey, faultCol color.RGBA) {
	rows := res.Rows
	c.text(left, top-14, title+" per round", black, 2)
	hi := 0.0
	for _, r := range rows {
		for _, st := range soakStages {
			if v, ok := r.stageValue(st, metric); ok {
				hi = max(hi, v/scale)
			}
		}
	}
	if hi <= 0 || len(rows) == 0 {
		return
	}
	hi = niceCeil(hi)
	xOf := func(i int) int {
		if len(rows) == 1 {
			return left + pw/2
		}
		return left + i*pw/(len(rows)-1)
	}
	yOf := func(v float64) int { return top + ph - int(v/hi*float64(ph)) }
	for i, r := range rows {
		if r.Fault != "" {
			for y := top; y < top+ph; y += 3 {
				c.dot(xOf(i), y, faultCol, 2)
			}
		}
	}
	for k := 0; k <= 4; k++ {
		v := hi * float64(k) / 4
		y := yOf(v)
		for x := left; x < left+pw; x += 3 {
			c.dot(x, y, grey, 1)
		}
		c.text(left-8-4*2*len(trimNum(v)), y-4, trimNum(v), black, 2)
	}
	c.line(left, top+ph, left+pw, top+ph, black)
	c.line(left, top, left, top+ph, black)
	step := max(1, len(rows)/10)
	for i := 0; i < len(rows); i += step {
		label := fmt.Sprint(rows[i].Round)
		c.text(xOf(i)-4*len(label), top+ph+6, label, black, 2)
	}
	c.text(left+pw-40, top+ph+20, "round", black, 2)
	c.text(left+pw-260, top-14, "faults: red dotted", faultCol, 2)
	for _, st := range soakStages {
		col := plotColors[st]
		prevX, prevY, prevProc := -1, -1, ""
		for i, r := range rows {
			v, ok := r.stageValue(st, metric)
			if !ok {
				prevX = -1
				continue
			}
			proc := ""
			for _, smp := range r.Stages {
				if smp.Stage == st {
					proc = smp.Proc
				}
			}
			x, y := xOf(i), yOf(v/scale)
			if prevX >= 0 && proc == prevProc {
				c.line(prevX, prevY, x, y, col)
			}
			c.dot(x-2, y-2, col, 5)
			prevX, prevY, prevProc = x, y, proc
		}
	}
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func trimNum(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}
