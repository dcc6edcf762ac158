package sweep

import (
	"log/slog"
	"time"
)

// The defaults the constructors give collaborators left nil, applied once (as pipeline's).

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
