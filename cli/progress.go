package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// Progress shows the state of long work on one line: redrawn in place on a terminal, or as
// a plain line at most every Every elsewhere (a log file, CI), where carriage returns would
// pile up into one unreadable line.
type Progress struct {
	w     io.Writer
	tty   bool
	every time.Duration

	mu      sync.Mutex
	last    time.Time
	lastLen int
	drawn   bool
}

// NewProgress writes to w; it redraws in place when w is a terminal.
func NewProgress(w io.Writer, every time.Duration) *Progress {
	return &Progress{w: w, tty: IsTerminal(w), every: every}
}

// IsTerminal reports whether w is a character device (a terminal).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// Update shows line: at once on a terminal, else if Every has passed since the last line.
func (p *Progress) Update(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		p.redraw(line)
		return
	}
	if now := time.Now(); p.last.IsZero() || now.Sub(p.last) >= p.every {
		p.last = now
		fmt.Fprintln(p.w, line)
	}
}

// Done shows the final line and ends it.
func (p *Progress) Done(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		p.redraw(line)
		fmt.Fprintln(p.w)
		p.drawn, p.lastLen = false, 0
		return
	}
	fmt.Fprintln(p.w, line)
}

// Clear removes the line being redrawn (before other output on a terminal).
func (p *Progress) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.drawn {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.lastLen))
		p.drawn, p.lastLen = false, 0
	}
}

func (p *Progress) redraw(line string) {
	pad := ""
	if n := p.lastLen - len(line); n > 0 {
		pad = strings.Repeat(" ", n)
	}
	fmt.Fprintf(p.w, "\r%s%s", line, pad)
	p.drawn, p.lastLen = true, len(line)
}

// Bar draws "[=====>    ]  45%" for done of total, width cells wide.
func Bar(done, total, width int) string {
	if total <= 0 { // nothing to do is all done
		done, total = 1, 1
	}
	done = min(max(done, 0), total)
	filled := done * width / total
	bar := strings.Repeat("=", filled)
	if filled < width {
		bar += ">" + strings.Repeat(" ", width-filled-1)
	}
	return fmt.Sprintf("[%s] %3d%%", bar, done*100/total)
}
