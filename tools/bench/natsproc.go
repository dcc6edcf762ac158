package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/kvcm-gc/kvcm-gc/natsembed"
)

// ServeNATS runs an embedded NATS JetStream server on a free loopback port until ctx is done,
// after writing "url <client URL>" to out. The harness runs it in a child process of its own:
// inside the harness, the server's allocations would trigger garbage collections that pause
// the harness's latency probes and be counted as Redis latency.
func ServeNATS(ctx context.Context, storeDir string, out io.Writer) error {
	s, err := natsembed.Start(natsembed.Config{StoreDir: storeDir, Host: "127.0.0.1", Port: -1})
	if err != nil {
		return err
	}
	defer func() {
		s.Shutdown()
		s.WaitForShutdown()
	}()
	if _, err := fmt.Fprintf(out, "url %s\n", s.ClientURL()); err != nil {
		return fmt.Errorf("announce nats url: %w", err)
	}
	<-ctx.Done()
	return nil
}

// startNATS starts "self nats" and returns the process and its client URL.
func startNATS(self, storeDir, logPath string) (*proc, string, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, "", fmt.Errorf("pipe for nats url: %w", err)
	}
	defer r.Close()
	p, err := startProcOut("nats", logPath, w, self, "nats", "-store", storeDir)
	_ = w.Close()
	if err != nil {
		return nil, "", err
	}
	type line struct {
		s   string
		err error
	}
	got := make(chan line, 1)
	go func() {
		s, err := bufio.NewReader(r).ReadString('\n')
		got <- line{s, err}
	}()
	select {
	case l := <-got:
		if url, ok := strings.CutPrefix(strings.TrimSpace(l.s), "url "); ok {
			return p, url, nil
		}
		_, _ = p.Stop(5 * time.Second)
		return nil, "", fmt.Errorf("start nats: no url announced (%v); see %s", l.err, logPath)
	case <-time.After(30 * time.Second):
		_, _ = p.Stop(5 * time.Second)
		return nil, "", fmt.Errorf("start nats: no url within 30s; see %s", logPath)
	}
}
