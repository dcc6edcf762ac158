package cli

import (
	"io"
	"log/slog"

	"github.com/kvcm-gc/kvcm-gc/config"
)

// NewLogger returns the process logger: structured lines on w (stderr), text or JSON, at the
// configured level. The configuration is validated, so unknown values cannot reach here.
func NewLogger(w io.Writer, c config.LogConfig) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
