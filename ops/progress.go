package ops

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progress draws a one-line progress bar on a terminal-like writer (stderr), redrawn in place
// with '\r' at most every progressEvery. It stays silent for reads that finish within
// progressDelay, so short replays print nothing but their result. A nil *progress does
// nothing, so callers need no checks.
type progress struct {
	w     io.Writer
	label string
	total uint64
	start time.Time
	now   func() time.Time

	mu     sync.Mutex
	done   uint64
	last   time.Time
	drawn  bool
	closed bool
}

const (
	progressDelay = 500 * time.Millisecond
	progressEvery = 200 * time.Millisecond
	progressWidth = 30
)

func newProgress(w io.Writer, label string, total uint64) *progress {
	if w == nil {
		return nil
	}
	return &progress{w: w, label: label, total: total, start: time.Now(), now: time.Now}
}

// Add counts n more items done.
func (p *progress) Add(n uint64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += n
	now := p.now()
	if now.Sub(p.start) < progressDelay || now.Sub(p.last) < progressEvery {
		return
	}
	p.last = now
	p.draw(now)
}

// Done draws the final state (if anything was drawn) and ends the line.
func (p *progress) Done() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	if p.drawn {
		p.draw(p.now())
		fmt.Fprintln(p.w)
	}
}

func (p *progress) draw(now time.Time) {
	p.drawn = true
	elapsed := now.Sub(p.start)
	rate := float64(p.done) / max(elapsed.Seconds(), 1e-3)
	if p.total == 0 {
		fmt.Fprintf(p.w, "\r%s %d (%.0f/s, %s)", p.label, p.done, rate, humanDuration(elapsed))
		return
	}
	frac := min(float64(p.done)/float64(p.total), 1)
	fill := int(frac * progressWidth)
	bar := strings.Repeat("=", fill) + strings.Repeat(" ", progressWidth-fill)
	eta := "?"
	if rate > 0 && p.done < p.total {
		eta = humanDuration(time.Duration(float64(p.total-p.done) / rate * float64(time.Second)))
	} else if p.done >= p.total {
		eta = "0s"
	}
	fmt.Fprintf(p.w, "\r%s [%s] %d/%d %3.0f%% %.0f/s eta %s ", p.label, bar, p.done, p.total, frac*100, rate, eta)
}
