package kube

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/kvcm-gc/kvcm-gc/tools/servers"
)

// proc is one component of the control plane, running as a child process whose output goes
// to <dir>/<name>.log.
type proc struct{ *servers.Child }

// startProc starts bin with args, its output in dir/<name>.log. The process is killed with
// its parent (see setDeathSignal), so a test binary that dies does not leave it running.
func startProc(dir, name, bin string, args ...string) (*proc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	// The control plane stays in the test's process group, so that an interrupt at the
	// terminal stops it with the test: a SysProcAttr of its own keeps StartChild from giving
	// it a group of its own.
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	setDeathSignal(cmd)
	c, err := servers.StartChild(name, filepath.Join(dir, name+".log"), cmd)
	if err != nil {
		return nil, err
	}
	return &proc{c}, nil
}

// exited returns an error naming the component if it has exited, and nil while it runs.
func (p *proc) exited() error {
	if p.Running() {
		return nil
	}
	return fmt.Errorf("%s exited: %v", p.Name, p.Err())
}

// stop kills the process and waits for it to exit. The control plane holds nothing worth a
// graceful shutdown: its state is thrown away with its directory.
func (p *proc) stop() {
	if !p.Running() {
		return
	}
	_ = p.Cmd.Process.Kill()
	select {
	case <-p.Exited():
	case <-time.After(30 * time.Second):
	}
}

// tail returns the last max bytes of the component's log.
func (p *proc) tail(max int64) string {
	f, err := os.Open(p.LogPath)
	if err != nil {
		return fmt.Sprintf("(open %s: %v)", p.LogPath, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(stat %s: %v)", p.LogPath, err)
	}
	off := st.Size() - max
	if off < 0 {
		off = 0
	}
	b, err := io.ReadAll(io.NewSectionReader(f, off, st.Size()-off))
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Sprintf("(read %s: %v)", p.LogPath, err)
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
