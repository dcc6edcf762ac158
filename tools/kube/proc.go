package kube

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// proc is one component of the control plane, running as a child process whose output goes
// to <dir>/<name>.log.
type proc struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited
	err  error         // how it exited, set before done is closed
}

// startProc starts bin with args, its output in dir/<name>.log. The process is killed with
// its parent (see setDeathSignal), so a test binary that dies does not leave it running.
func startProc(dir, name, bin string, args ...string) (*proc, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("create %s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = f
	cmd.Stderr = f
	cmd.Dir = dir
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = f.Close()
		close(p.done)
	}()
	return p, nil
}

// exited returns an error naming the component if it has exited, and nil while it runs.
func (p *proc) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited: %v", p.name, p.err)
	default:
		return nil
	}
}

// stop kills the process and waits for it to exit. The control plane holds nothing worth a
// graceful shutdown: its state is thrown away with its directory.
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
	}
}

// tail returns the last max bytes of the component's log.
func (p *proc) tail(max int64) string {
	f, err := os.Open(p.log)
	if err != nil {
		return fmt.Sprintf("(open %s: %v)", p.log, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(stat %s: %v)", p.log, err)
	}
	off := st.Size() - max
	if off < 0 {
		off = 0
	}
	b, err := io.ReadAll(io.NewSectionReader(f, off, st.Size()-off))
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Sprintf("(read %s: %v)", p.log, err)
	}
	s := string(b)
	if off > 0 {
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
		s = "…\n" + s
	}
	return s
}
