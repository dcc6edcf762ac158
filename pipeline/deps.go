package pipeline

import (
	"log/slog"
	"time"
)

// The defaults the constructors give collaborators left nil, applied once so no stage checks
// for nil on every call.

// orUnregistered returns m, or metrics registered nowhere: they count, nobody scrapes them.
func orUnregistered(m *Metrics) *Metrics {
	if m == nil {
		return NewMetrics(nil)
	}
	return m
}

// orDiscard returns l, or a logger that writes nothing.
func orDiscard(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

// orNow returns now, or the wall clock.
func orNow(now func() time.Time) func() time.Time {
	if now == nil {
		return time.Now
	}
	return now
}
