package ops

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// StuckDeletingStatus counts the stuck DELETING locations (collect_deleting) the deleters
// handled, from the delete events stored within the last WindowSeconds: every target of
// reason stuck_deleting, flattened as replay reads them (subjects.Event.PerTarget).
type StuckDeletingStatus struct {
	WindowSeconds float64 `json:"window_seconds"`
	// Outcomes counts the targets by deleter outcome: deleted is collected, noop_* were
	// finished or rewritten by KVCM meanwhile.
	Outcomes map[string]int `json:"outcomes"`
	// DataLeft counts the spec URIs of collected ones whose data stayed in place, by reason.
	DataLeft map[string]int `json:"data_left"`
}

// WithStuckDeleting makes Status read the delete events of the last window and count the
// stuck DELETING among their targets (StatusReport.StuckDeleting). It reads every delete
// event of the window, so it is for deployments that collect stuck DELETING.
func WithStuckDeleting(window time.Duration) StatusOption {
	return func(o *statusOptions) { o.stuckWindow = window }
}

// stuckDeletingStatus reads the delete events stored since now − window.
func stuckDeletingStatus(
	ctx context.Context,
	js jetstream.JetStream,
	names subjects.Names,
	now time.Time,
	window time.Duration,
	problem func(string, ...any),
) *StuckDeletingStatus {
	st := &StuckDeletingStatus{WindowSeconds: window.Seconds(), Outcomes: map[string]int{}, DataLeft: map[string]int{}}
	err := readStream(ctx, js, names.EventsStream(),
		readRange{Filters: []string{names.EventKindFilter(subjects.EventDelete)}, StartTime: now.Add(-window)}, nil,
		func(m jetstream.Msg, md *jetstream.MsgMetadata) error {
			ev, err := subjects.DecodeEvent(m.Data())
			if err != nil {
				problem("delete event (seq %d): %v", md.Sequence.Stream, err)
				return nil
			}
			per := ev.PerTarget()
			for i, one := range per {
				if one.Reason != subjects.ReasonStuckDeleting {
					continue
				}
				st.Outcomes[one.Outcome]++
				if len(ev.Targets) == len(per) {
					// PerTarget folds the skips into Detail; the counts are the target's own.
					for reason, n := range ev.Targets[i].PhysicalSkips {
						st.DataLeft[reason] += n
					}
				}
			}
			return nil
		})
	if err != nil {
		problem("stuck DELETING from the delete events: %v", err)
	}
	return st
}

// writeStuck prints the STUCK DELETING section.
func (s *StuckDeletingStatus) writeStuck(w io.Writer) {
	if s == nil {
		return
	}
	fmt.Fprintf(w, "\nSTUCK DELETING (delete events of the last %s)\n", humanDuration(secs(s.WindowSeconds)))
	n := 0
	for _, v := range s.Outcomes {
		n += v
	}
	fmt.Fprintf(w, "  handled    %d %s\n", n, counts(s.Outcomes))
	left := 0
	for _, v := range s.DataLeft {
		left += v
	}
	fmt.Fprintf(w, "  data left  %d spec URIs %s\n", left, counts(s.DataLeft))
}

// counts formats the non-zero entries by name: "(a 2, b 1)", or "" when there are none.
func counts(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if m[k] != 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "(" + strings.Join(parts, ", ") + ")"
}
