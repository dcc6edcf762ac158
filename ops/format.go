package ops

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Formatting helpers of the human tables.

// humanBytes prints a byte count with a binary unit.
func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// humanDuration prints a duration rounded to what a reader cares about.
func humanDuration(d time.Duration) string {
	neg := d < 0
	if neg {
		d = -d
	}
	var s string
	switch {
	case d < time.Second:
		s = d.Round(time.Millisecond).String()
	case d < time.Minute:
		s = d.Round(100 * time.Millisecond).String()
	case d < 48*time.Hour:
		s = d.Round(time.Second).String()
	default:
		days := d / (24 * time.Hour)
		s = fmt.Sprintf("%dd%s", days, (d - days*24*time.Hour).Round(time.Minute))
	}
	if neg {
		return "-" + s
	}
	return s
}

// stamp prints a time in UTC with its distance from now ("2025-01-02T03:04:05Z (12s ago)").
func stamp(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	rel := humanDuration(d) + " ago"
	if d < 0 {
		rel = "in " + humanDuration(-d)
	}
	return t.UTC().Format(time.RFC3339) + " (" + rel + ")"
}

// timeOnly prints a time in UTC without the distance.
func timeOnly(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// orDash replaces an empty cell.
func orDash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}

// idCell shows a location id whole in a cell, quoted (Go syntax) when it holds a space, a
// control byte or anything not printable, so that it can be copied back exactly: EventReport
// ids run past any width ("kvs#event_report_l1p5#hbm#10.0.0.8:9000"), and a medium or host
// may hold spaces.
func idCell(s string) string {
	if s == "" {
		return "-"
	}
	if !utf8.ValidString(s) ||
		strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0 ||
		s == "-" {
		return strconv.Quote(s)
	}
	return s
}

// cell makes a value safe for one tab-separated cell: tabs and newlines would break the
// table, so they become spaces, and overlong text is cut.
func cell(s string, max int) string {
	s = strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, s)
	if max > 0 && len([]rune(s)) > max {
		return string([]rune(s)[:max-1]) + "…"
	}
	return s
}
