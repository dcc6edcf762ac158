package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// The defaults the constructors give collaborators left nil, applied once so no stage checks
// for nil on every call, and the refusal of those a stage cannot run without. The stages of
// package sweep use the exported ones too.

// OrDiscard returns l, or a logger that writes nothing.
func OrDiscard(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

// OrNow returns now, or the wall clock.
func OrNow(now func() time.Time) func() time.Time {
	if now == nil {
		return time.Now
	}
	return now
}

// Refusals gathers why a constructor refuses its arguments (a configuration's validation
// error, a collaborator it cannot run without left nil), so that one error names them all.
type Refusals []error

// Need refuses the arguments with missing ("no publisher") unless given.
func (r *Refusals) Need(given bool, missing string) {
	if !given {
		*r = append(*r, errors.New(missing))
	}
}

// Err returns nil when nothing was refused, else one error of who naming every refusal.
func (r Refusals) Err(who string) error {
	if err := errors.Join(r...); err != nil {
		return fmt.Errorf("%s: %w", who, err)
	}
	return nil
}

// Warn logs a failed operation, except when it failed because the caller is shutting down
// (ctx is done): then at debug level.
func Warn(ctx context.Context, log *slog.Logger, msg string, args ...any) {
	if ctx.Err() != nil {
		log.Debug(msg, args...)
		return
	}
	log.Warn(msg, args...)
}
