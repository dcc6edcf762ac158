package testenv

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"
)

// Context returns a context that ends with the test, or after 30 s: a test waiting on a
// server fails with the request's error rather than hanging until the test binary's timeout.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Messages is a slog.Handler that keeps the message of every record it handles, for a test
// to count what a component logged. It is safe for concurrent use.
type Messages struct {
	mu   sync.Mutex
	msgs []string
}

// Enabled implements slog.Handler: every level.
func (m *Messages) Enabled(context.Context, slog.Level) bool { return true }

// Handle implements slog.Handler.
func (m *Messages) Handle(_ context.Context, r slog.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.msgs = append(m.msgs, r.Message)
	return nil
}

// WithAttrs implements slog.Handler; the attributes are not kept.
func (m *Messages) WithAttrs([]slog.Attr) slog.Handler { return m }

// WithGroup implements slog.Handler.
func (m *Messages) WithGroup(string) slog.Handler { return m }

// All returns the messages handled so far, in order.
func (m *Messages) All() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.msgs)
}

// Count returns how many records had the message msg.
func (m *Messages) Count(msg string) int {
	n := 0
	for _, s := range m.All() {
		if s == msg {
			n++
		}
	}
	return n
}

// Buffer is a bytes.Buffer that several goroutines may write to: the log or the output of a
// process run in the test.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write implements io.Writer.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what has been written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
