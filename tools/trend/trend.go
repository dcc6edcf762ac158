// Package trend fits the slope of a figure sampled over time (a stage's memory, round by
// round) with a confidence interval that holds for samples that wander: a high sample is
// followed by high ones for a while (a heap that happens to hold a large batch, a resident set
// that keeps its last peak), so the interval of a plain least-squares fit is too narrow and a
// wander reads as a trend. The method of batch means: the line is fitted through the means of
// consecutive batches of samples, whose deviations are close to independent once a batch spans
// more samples than a wander lasts, with Student's t on the degrees of freedom left.
package trend

import (
	"math"
	"slices"
)

// Fit is a fitted slope with its interval.
type Fit struct {
	// Slope per unit of x, and its 95% confidence interval [Lo, Hi] (±Inf: nothing to tell).
	Slope, Lo, Hi float64
	// Mean, Min and Max of the samples used.
	Mean, Min, Max float64
	// Samples used, Batches fitted, Segments they came from, DF the degrees of freedom of the
	// interval (0: no interval).
	Samples, Batches, Segments, DF int
}

// Segment is a series of samples at x (increasing) with values y, at a level of its own: the
// samples of one process, whose level a restart changes.
type Segment struct {
	X, Y []float64
}

// FitSegments fits one slope through segments, each at its own level (a fit with fixed effects:
// only the slope within each segment counts, never the jump from one to the next), over the
// means of consecutive batches of `batch` samples within each segment. A segment's samples that
// fill no whole batch are left out at its start, and a segment of fewer than two batches adds
// nothing. With batch 1 it is an ordinary least-squares fit with a level per segment.
func FitSegments(segs []Segment, batch int) Fit {
	batch = max(batch, 1)
	var f Fit
	var all []float64
	type point struct{ x, y float64 }
	var groups [][]point
	for _, s := range segs {
		nb := len(s.X) / batch
		if nb < 2 {
			continue
		}
		skip := len(s.X) - nb*batch
		var g []point
		for b := range nb {
			lo, hi := skip+b*batch, skip+(b+1)*batch
			g = append(g, point{mean(s.X[lo:hi]), mean(s.Y[lo:hi])})
			all = append(all, s.Y[lo:hi]...)
		}
		groups = append(groups, g)
	}
	f.Lo, f.Hi = math.Inf(-1), math.Inf(1)
	if len(all) == 0 {
		return f
	}
	f.Samples, f.Segments = len(all), len(groups)
	f.Mean, f.Min, f.Max = mean(all), slices.Min(all), slices.Max(all)
	var sxx, sxy float64
	for _, g := range groups {
		f.Batches += len(g)
		mx, my := 0.0, 0.0
		for _, p := range g {
			mx += p.x
			my += p.y
		}
		mx, my = mx/float64(len(g)), my/float64(len(g))
		for i := range g {
			g[i] = point{g[i].x - mx, g[i].y - my}
			sxx += g[i].x * g[i].x
			sxy += g[i].x * g[i].y
		}
	}
	if sxx == 0 {
		return f
	}
	f.Slope = sxy / sxx
	f.DF = f.Batches - f.Segments - 1
	if f.DF < 1 {
		f.DF = 0
		return f
	}
	var rss float64
	for _, g := range groups {
		for _, p := range g {
			r := p.y - f.Slope*p.x
			rss += r * r
		}
	}
	half := StudentT975(f.DF) * math.Sqrt(rss/float64(f.DF)/sxx)
	f.Lo, f.Hi = f.Slope-half, f.Slope+half
	return f
}

func mean(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// StudentT975 is the 97.5th percentile of Student's t with df degrees of freedom (the half
// width of a two-sided 95% interval, in standard errors).
func StudentT975(df int) float64 {
	if df < 1 {
		return math.Inf(1)
	}
	// The t whose upper tail is 2.5%, by bisection on the distribution function.
	lo, hi := 0.0, 1000.0
	for range 100 {
		mid := (lo + hi) / 2
		if tTail(mid, float64(df)) > 0.025 {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

// tTail is P(T > t) for Student's t with df degrees of freedom, t >= 0.
func tTail(t, df float64) float64 {
	return 0.5 * regIncBeta(df/2, 0.5, df/(df+t*t))
}

// regIncBeta is the regularized incomplete beta function I_x(a, b), by its continued fraction
// (Lentz's method).
func regIncBeta(a, b, x float64) float64 {
	if x <= 0 {
		return 0
	}
	if x >= 1 {
		return 1
	}
	lbeta, _ := math.Lgamma(a + b)
	la, _ := math.Lgamma(a)
	lb, _ := math.Lgamma(b)
	front := math.Exp(lbeta - la - lb + a*math.Log(x) + b*math.Log(1-x))
	if x > (a+1)/(a+b+2) {
		return 1 - front*betaCF(b, a, 1-x)/b
	}
	return front * betaCF(a, b, x) / a
}

// betaCF evaluates the continued fraction of I_x(a, b) by the modified Lentz method; each
// iteration applies the fraction's even term, then its odd one.
func betaCF(a, b, x float64) float64 {
	const tiny = 1e-300
	nonzero := func(v float64) float64 {
		if math.Abs(v) < tiny {
			return tiny
		}
		return v
	}
	c, d := 1.0, 1/nonzero(1-(a+b)*x/(a+1))
	h := d
	// term applies one term of numerator num and returns the factor it multiplies h by.
	term := func(num float64) float64 {
		d = 1 / nonzero(1+num*d)
		c = nonzero(1 + num/c)
		return d * c
	}
	for m := 1; m <= 300; m++ {
		fm := float64(m)
		h *= term(fm * (b - fm) * x / ((a + 2*fm - 1) * (a + 2*fm)))
		del := term(-(a + fm) * (a + b + fm) * x / ((a + 2*fm) * (a + 2*fm + 1)))
		h *= del
		if math.Abs(del-1) < 1e-14 {
			break
		}
	}
	return h
}
