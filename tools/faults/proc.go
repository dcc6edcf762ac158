package faults

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kvcm-gc/kvcm-gc/internal/procstat"
	"github.com/kvcm-gc/kvcm-gc/tools/servers"
)

// rssSamplePeriod is how often a child's VmHWM is read.
const rssSamplePeriod = 50 * time.Millisecond

// stopTimeout bounds a graceful stop (SIGTERM) before it becomes a SIGKILL.
const stopTimeout = 20 * time.Second

// Proc is one stage process: a child started from a built binary, its stdout and stderr
// appended to a log file, its peak resident set size sampled while it runs.
type Proc struct {
	Name string
	c    *servers.Child

	peak    procstat.Peak
	sampled chan struct{}

	mu       sync.Mutex
	httpAddr string
}

// StartProc starts bin with args and env (added to the driver's environment), appending its
// output to logPath.
func StartProc(name, logPath, bin string, args, env []string) (*Proc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	c, err := servers.StartChild(name, logPath, cmd)
	if err != nil {
		return nil, err
	}
	p := &Proc{Name: name, c: c, sampled: make(chan struct{})}
	go p.sample()
	return p, nil
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.c.Pid() }

func (p *Proc) sample() {
	defer close(p.sampled)
	p.peak.Watch(p.c.Pid(), rssSamplePeriod, p.c.Exited())
}

// PeakRSS is the largest resident set size seen, in bytes.
func (p *Proc) PeakRSS() int64 { return p.peak.Load() }

// Running reports whether the process has not exited.
func (p *Proc) Running() bool { return p.c.Running() }

// Kill ends the process with SIGKILL (a crash: no shutdown code runs) and waits for it.
func (p *Proc) Kill() {
	_ = p.c.Cmd.Process.Signal(syscall.SIGKILL)
	<-p.c.Exited()
	<-p.sampled
}

// Stop asks the process to stop (SIGTERM) and waits; it kills it after stopTimeout. It
// returns the exit error of a process that did not exit cleanly.
func (p *Proc) Stop() error {
	_ = p.c.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.c.Exited():
	case <-time.After(stopTimeout):
		p.Kill()
		return fmt.Errorf("%s did not stop within %s", p.Name, stopTimeout)
	}
	<-p.sampled
	var ee *exec.ExitError
	if errors.As(p.c.Err(), &ee) && !ee.Exited() {
		return nil // ended by a signal after all (a kill raced the stop)
	}
	if err := p.c.Err(); err != nil {
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	return nil
}

// Exited returns a channel closed when the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.c.Exited() }

// LogPath is the file the process writes its output to.
func (p *Proc) LogPath() string { return p.c.LogPath }

// HTTPAddr returns the address of the process's HTTP endpoint, read from its log ("" until
// it has logged it). The processes log JSON lines.
func (p *Proc) HTTPAddr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.httpAddr != "" {
		return p.httpAddr
	}
	data, err := os.ReadFile(p.c.LogPath)
	if err != nil {
		return ""
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "http server listening" && line.Addr != "" {
			p.httpAddr = line.Addr
		}
	}
	return p.httpAddr
}

// LogTail returns the last n lines of the process's output.
func (p *Proc) LogTail(n int) string { return tail(p.c.LogPath, n) }

func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "(no log)"
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
