package bench

import "time"

// RSSSample is a process's resident set size (VmRSS) at one moment.
type RSSSample struct {
	At  time.Time
	RSS int64 // bytes
}

// rssEvery is how often the harness reads a stage process's resident set.
const rssEvery = 50 * time.Millisecond

// meanRSS is the time-weighted mean of the resident set over [from, to]: each sample holds
// until the next one (the last until to), and the time before the first sample is left out.
// Samples are in time order. 0 when no sample covers any of the interval.
//
// Peak RSS (VmHWM) is the highest point of a run, and with the stages' GOGC=400 a longer run
// gives the heap more chances to grow to its limit before a collection: the peak of the
// same working set is higher the longer the run. The mean over the run weighs every moment
// alike, so it stays where it is when a run at the same working set only lasts longer, and
// grows when what the process holds grows.
func meanRSS(s []RSSSample, from, to time.Time) int64 {
	var sum float64 // byte-seconds
	var covered time.Duration
	for i, x := range s {
		start := x.At
		end := to
		if i+1 < len(s) {
			end = s[i+1].At
		}
		start, end = later(start, from), earlier(end, to)
		if !end.After(start) {
			continue
		}
		d := end.Sub(start)
		sum += float64(x.RSS) * d.Seconds()
		covered += d
	}
	if covered <= 0 {
		return 0
	}
	return int64(sum / covered.Seconds())
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
