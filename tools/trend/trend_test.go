package trend

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// StudentT975 agrees with the tables to four places.
func TestStudentT975(t *testing.T) {
	for df, want := range map[int]float64{1: 12.7062, 2: 4.3027, 3: 3.1824, 5: 2.5706, 8: 2.3060, 10: 2.2281, 20: 2.0860, 30: 2.0423, 100: 1.9840, 1000: 1.9623} {
		require.InDelta(t, want, StudentT975(df), 1e-4, "df %d", df)
	}
	require.True(t, math.IsInf(StudentT975(0), 1))
}

// FitSegments over one segment with batches of one is the ordinary least-squares line: slope
// and interval as the textbook computes them.
func TestFitSegmentsOrdinary(t *testing.T) {
	x := []float64{1, 2, 3, 4, 5, 6}
	y := []float64{2.1, 3.9, 6.2, 7.8, 10.1, 12.0}
	f := FitSegments([]Segment{{X: x, Y: y}}, 1)
	// Slope 1.99143, residual sum of squares 0.10705 on 4 df, Sxx 17.5: se 0.039106, t 2.77645.
	require.InDelta(t, 1.99143, f.Slope, 1e-5)
	require.InDelta(t, 1.88285, f.Lo, 1e-4)
	require.InDelta(t, 2.10000, f.Hi, 1e-4)
	require.Equal(t, 4, f.DF)
	require.InDelta(t, 7.01667, f.Mean, 1e-4)
}

// Each segment keeps a level of its own: the jumps between them make no slope, and a slope
// within them is found whatever the jumps.
func TestFitSegmentsLevels(t *testing.T) {
	var segs []Segment
	for i, level := range []float64{100, 40, 70} {
		var s Segment
		for r := range 12 {
			x := float64(i*12 + r)
			s.X = append(s.X, x)
			s.Y = append(s.Y, level+0.5*float64(r)+0.1*float64(r%2))
		}
		segs = append(segs, s)
	}
	f := FitSegments(segs, 3)
	require.InDelta(t, 0.5, f.Slope, 0.01)
	require.Less(t, f.Lo, 0.5)
	require.Greater(t, f.Hi, 0.5)
	require.Equal(t, 3, f.Segments)
	require.Equal(t, 12, f.Batches)
	require.Equal(t, 8, f.DF)
	// A segment too short for two batches adds nothing, and its samples are not counted.
	f = FitSegments(append(segs, Segment{X: []float64{40, 41}, Y: []float64{0, 1000}}), 3)
	require.Equal(t, 3, f.Segments)
	require.Equal(t, 36, f.Samples)
	require.InDelta(t, 0.5, f.Slope, 0.01)
	// Nothing to fit: no interval.
	f = FitSegments([]Segment{{X: []float64{1}, Y: []float64{5}}}, 1)
	require.True(t, math.IsInf(f.Lo, -1) && math.IsInf(f.Hi, 1), "%+v", f)
}

// Over 400 series whose noise keeps 0.7 of the last sample's, 60 samples in two segments, the
// 95% interval of batches of 6 holds the true slope in 364 to 380 (seeds 1-7: 91-95%), where
// batches of one, a plain fit, hold it in 251 to 268 (63-67%).
func TestFitSegmentsCoverage(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	series := func(slope float64) []Segment {
		var segs [2]Segment
		noise := 0.0
		for i := range 60 {
			noise = 0.7*noise + rng.NormFloat64()
			s := &segs[i/30]
			s.X = append(s.X, float64(i))
			s.Y = append(s.Y, float64(100*(i/30))+slope*float64(i)+noise)
		}
		return segs[:]
	}
	held, plain := 0, 0
	for range 400 {
		segs := series(0.2)
		if f := FitSegments(segs, 6); f.Lo <= 0.2 && 0.2 <= f.Hi {
			held++
		}
		if f := FitSegments(segs, 1); f.Lo <= 0.2 && 0.2 <= f.Hi {
			plain++
		}
	}
	require.GreaterOrEqual(t, held, 360, "batches of 6 held the slope in %d of 400", held)
	require.Less(t, plain, 300, "a plain fit held the slope in %d of 400", plain)
}
