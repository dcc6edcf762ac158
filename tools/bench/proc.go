package bench

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/kvcm-gc/kvcm-gc/internal/procstat"
	"github.com/kvcm-gc/kvcm-gc/tools/servers"
)

// proc is a child process of the harness: a stage or the NATS server.
type proc struct {
	name    string
	c       *servers.Child
	started time.Time
	stopped bool
	peak    procstat.Peak
	// rss are the process's VmRSS readings, every rssEvery; written by sample only, read once
	// sampled is closed.
	rss     []RSSSample
	sampled chan struct{}
}

// Usage is what the operating system says a finished child used.
type Usage struct {
	// PeakRSS is the child's peak resident set size (VmHWM; see procstat), in bytes.
	PeakRSS int64
	// CPU is user plus system time.
	CPU time.Duration
	// Wall is the time from start to exit.
	Wall time.Duration
	// RSS are its resident set readings, every rssEvery from start to exit (for time-weighted
	// means over part of its run: StageRun.MeanRSS).
	RSS []RSSSample
}

// startProc starts bin with args, its stdout and stderr appended to logPath.
func startProc(name, logPath, bin string, args ...string) (*proc, error) {
	return startProcOut(name, logPath, nil, bin, args...)
}

// startProcOut is startProc with stdout going to out instead (when not nil).
func startProcOut(name, logPath string, out *os.File, bin string, args ...string) (*proc, error) {
	cmd := exec.Command(bin, args...)
	if out != nil {
		cmd.Stdout = out
	}
	c, err := servers.StartChild(name, logPath, cmd)
	if err != nil {
		return nil, err
	}
	p := &proc{name: name, c: c, started: time.Now(), sampled: make(chan struct{})}
	go p.sample()
	return p, nil
}

// sample reads the process's peak and current resident set every rssEvery until it exits.
// The kernel keeps the high-water mark itself, so the period only bounds how much of the
// process's last moments the peak can miss; the readings of the resident set are what a
// time-weighted mean is made of.
func (p *proc) sample() {
	defer close(p.sampled)
	pid := p.c.Pid()
	t := time.NewTicker(rssEvery)
	defer t.Stop()
	for {
		p.peak.Sample(pid)
		if v, ok := procstat.RSS(pid); ok {
			p.rss = append(p.rss, RSSSample{At: time.Now(), RSS: v})
		}
		select {
		case <-p.c.Exited():
			return
		case <-t.C:
		}
	}
}

// Exited reports whether the process has ended by itself.
func (p *proc) Exited() bool { return !p.c.Running() }

// Terminate sends SIGTERM once, without waiting: Stop then waits for the exit.
func (p *proc) Terminate() {
	if !p.stopped {
		// The last reading before the signal: after it the process may be gone at once.
		p.peak.Sample(p.c.Pid())
		p.stopped = true
		if !p.Exited() {
			_ = p.c.Cmd.Process.Signal(syscall.SIGTERM)
		}
	}
}

// Stop sends SIGTERM, waits up to grace for a clean exit (a stage drains in-flight messages
// and writes its profile), then kills. It returns the child's usage; an exit other than a
// clean one after SIGTERM is an error.
func (p *proc) Stop(grace time.Duration) (Usage, error) {
	p.Terminate()
	var errs []error
	select {
	case <-p.c.Exited():
	case <-time.After(grace):
		_ = p.c.Cmd.Process.Kill()
		<-p.c.Exited()
		errs = append(errs, fmt.Errorf("stop %s: no exit within %s, killed", p.name, grace))
	}
	<-p.sampled
	u := Usage{Wall: time.Since(p.started), PeakRSS: p.peak.Load(), RSS: p.rss}
	if st := p.c.Cmd.ProcessState; st != nil {
		u.CPU = st.UserTime() + st.SystemTime()
	}
	if err := p.c.Err(); err != nil && len(errs) == 0 {
		errs = append(errs, fmt.Errorf("%s exited: %w (see %s)", p.name, err, p.c.LogPath))
	}
	return u, errors.Join(errs...)
}
