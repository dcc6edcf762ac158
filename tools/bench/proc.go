package bench

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/kvcm-gc/kvcm-gc/internal/procstat"
)

// proc is a child process of the harness: a stage or the NATS server.
type proc struct {
	name    string
	cmd     *exec.Cmd
	log     *os.File
	started time.Time
	exited  chan struct{}
	waitErr error
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
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log of %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if out != nil {
		cmd.Stdout = out
	}
	// Its own process group: a Ctrl-C of the harness reaches the harness, which stops its
	// children in order, rather than every child at once.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logf, started: time.Now(), exited: make(chan struct{}), sampled: make(chan struct{})}
	go p.sample()
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// sample reads the process's peak and current resident set every rssEvery until it exits.
// The kernel keeps the high-water mark itself, so the period only bounds how much of the
// process's last moments the peak can miss; the readings of the resident set are what a
// time-weighted mean is made of.
func (p *proc) sample() {
	defer close(p.sampled)
	pid := p.cmd.Process.Pid
	t := time.NewTicker(rssEvery)
	defer t.Stop()
	for {
		p.peak.Sample(pid)
		if v, ok := procstat.RSS(pid); ok {
			p.rss = append(p.rss, RSSSample{At: time.Now(), RSS: v})
		}
		select {
		case <-p.exited:
			return
		case <-t.C:
		}
	}
}

// Exited reports whether the process has ended by itself.
func (p *proc) Exited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// Terminate sends SIGTERM once, without waiting: Stop then waits for the exit.
func (p *proc) Terminate() {
	if !p.stopped {
		// The last reading before the signal: after it the process may be gone at once.
		p.peak.Sample(p.cmd.Process.Pid)
		p.stopped = true
		if !p.Exited() {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
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
	case <-p.exited:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.exited
		errs = append(errs, fmt.Errorf("stop %s: no exit within %s, killed", p.name, grace))
	}
	<-p.sampled
	_ = p.log.Close()
	u := Usage{Wall: time.Since(p.started), PeakRSS: p.peak.Load(), RSS: p.rss}
	if st := p.cmd.ProcessState; st != nil {
		u.CPU = st.UserTime() + st.SystemTime()
	}
	if p.waitErr != nil && len(errs) == 0 {
		errs = append(errs, fmt.Errorf("%s exited: %w (see %s)", p.name, p.waitErr, p.log.Name()))
	}
	return u, errors.Join(errs...)
}
