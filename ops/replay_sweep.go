package ops

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/pipeline/sweep"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// FileReplay is one file of a replayed sweep batch: what the sweepers did with it then (the
// sweep events of that message), its fate since (the last sweep event about the file), and
// what a sweeper would do now — the sweeper's own Sweep in dry-run against the file system
// and the metadata now.
type FileReplay struct {
	Path string `json:"path"`
	Key  int64  `json:"key,string"`
	Spec string `json:"spec"`
	// Quarantine is the file's name in the quarantine (a look into the quarantine's batch).
	Quarantine string  `json:"quarantine,omitempty"`
	Then       Verdict `json:"then"`
	Fate       Verdict `json:"fate"`
	Now        Verdict `json:"now"`
}

// replaySweep is Replay for the sweeper: the SWEEP stream, file by file.
func replaySweep(ctx context.Context, js jetstream.JetStream, names subjects.Names, q ReplayQuery, deps ReplayDeps,
	emit func(ReplayMessage) error) (ReplaySummary, error) {
	sum := ReplaySummary{Then: map[string]int{}, Now: map[string]int{}}
	if deps.Sweeper == nil {
		return sum, fmt.Errorf("replay %s: no sweep configuration", pipeline.StageSweeper)
	}
	filter := names.SweepFilter()
	if q.Instance != "" {
		filter = names.SweepSubject(q.Instance)
	}
	stream := names.SweepStream()
	rng := readRange{Filters: []string{filter}, StartSeq: q.SeqFrom, StartTime: q.TimeFrom}
	first, err := firstMessage(ctx, js, stream, rng)
	if err != nil || first == nil {
		return sum, err
	}
	// The sweep events from the first message on (a minute early: another server's clock).
	type step struct {
		seq uint64
		ev  subjects.Event
	}
	bySource := map[uint64]map[string][]step{} // source seq -> file -> its steps
	last := map[string]step{}
	efilter := names.EventKindFilter(subjects.EventSweep)
	if q.Instance != "" {
		efilter = names.EventSubject(subjects.EventSweep, q.Instance)
	}
	var bar *progress
	err = readStream(ctx, js, names.EventsStream(),
		readRange{Filters: []string{efilter}, StartTime: first.Time.Add(-time.Minute)},
		func(total uint64) { bar = newProgress(deps.Progress, "read events", total) },
		func(m jetstream.Msg, md *jetstream.MsgMetadata) error {
			bar.Add(1)
			ev, err := subjects.DecodeEvent(m.Data())
			if err != nil || len(ev.File) == 0 || ev.Stage != pipeline.StageSweeper {
				return nil
			}
			f := string(ev.File)
			if q.File != "" && f != q.File {
				return nil
			}
			st := step{seq: md.Sequence.Stream, ev: ev}
			last[f] = st
			if ev.Source != nil && ev.Source.Stream == stream {
				if bySource[ev.Source.Seq] == nil {
					bySource[ev.Source.Seq] = map[string][]step{}
				}
				bySource[ev.Source.Seq][f] = append(bySource[ev.Source.Seq][f], st)
			}
			return nil
		})
	bar.Done()
	if err != nil {
		return sum, fmt.Errorf("index sweep events: %w", err)
	}
	verdict := func(st step) Verdict {
		return Verdict{Decision: st.ev.Outcome, Reason: st.ev.Reason, Detail: st.ev.Detail, EventSeq: st.seq}
	}
	err = readStream(ctx, js, stream, rng,
		func(total uint64) { bar = newProgress(deps.Progress, "replay sweeper", total) },
		func(m jetstream.Msg, md *jetstream.MsgMetadata) error {
			bar.Add(1)
			if q.SeqTo > 0 && md.Sequence.Stream > q.SeqTo || !q.TimeTo.IsZero() && md.Timestamp.After(q.TimeTo) {
				return errStop
			}
			rm := replayMessage(names, m, md)
			b, err := subjects.DecodeSweepBatch(m.Data())
			if err != nil {
				rm.Poison = err.Error()
				sum.Poison++
				sum.Messages++
				return emit(rm)
			}
			rm.Round = b.Round
			var files []subjects.SweepFile
			for _, f := range b.Files {
				if (q.File == "" || string(f.Path) == q.File) && (q.BlockKey == nil || f.Key == *q.BlockKey) {
					files = append(files, f)
				}
			}
			if len(files) == 0 {
				return nil
			}
			b.Files = files
			// The sweeper's own decision, in dry-run: nothing is renamed or unlinked.
			now, err := deps.Sweeper.Sweep(ctx, b)
			for i, f := range files {
				fr := FileReplay{Path: string(f.Path), Key: f.Key, Spec: f.Spec, Quarantine: string(f.Quarantine),
					Then: Verdict{Decision: DecisionNoEvent, Detail: "no sweep event for this batch"},
					Fate: Verdict{Decision: DecisionNoEvent}}
				if b.Kind == subjects.SweepQuarantine {
					fr.Then.Detail = "no step recorded: waiting out sweep_quarantine (or not handled yet)"
				}
				if steps := bySource[md.Sequence.Stream][string(f.Path)]; len(steps) > 0 {
					fr.Then = verdict(steps[len(steps)-1])
					if len(steps) > 1 {
						fr.Then.Detail = subjects.JoinDetail(fmt.Sprintf("%d steps recorded", len(steps)), fr.Then.Detail)
					}
				}
				if st, ok := last[string(f.Path)]; ok {
					fr.Fate = verdict(st)
				}
				switch r := now[i]; {
				case err != nil && r.Outcome == "":
					fr.Now = Verdict{Decision: DecisionError, Detail: err.Error()}
				case r.Outcome == "":
					fr.Now = Verdict{Decision: "waiting", Reason: r.Reason, Detail: "in quarantine for less than sweep_quarantine"}
				default:
					fr.Now = Verdict{Decision: r.Outcome, Reason: r.Reason, Detail: r.Detail}
				}
				rm.Files = append(rm.Files, fr)
				sum.Locations++
				sum.Then[fr.Then.String()]++
				sum.Now[fr.Now.String()]++
			}
			sum.Messages++
			return emit(rm)
		})
	bar.Done()
	if err != nil {
		return sum, fmt.Errorf("replay %s: %w", pipeline.StageSweeper, err)
	}
	return sum, nil
}

// writeReplayFiles prints the files of a replayed sweep batch.
func writeReplayFiles(w io.Writer, files []FileReplay) {
	if len(files) == 0 {
		return
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "  FILE\tKEY\tTHEN\tFATE\tNOW\tWHY NOW")
	for _, f := range files {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", f.Path, strconv.FormatInt(f.Key, 10), cell(f.Then.String(), 40),
			cell(f.Fate.String(), 40), cell(f.Now.String(), 40), cell(orDash(f.Now.Detail), 80))
	}
	_ = tw.Flush()
}

// replaySweeper is the sweeper a replay consults: the pipeline's own, in dry-run (the storage
// refuses every rename and unlink, DESIGN §8.8), on the replay's registry and stores.
func replaySweeper(
	s ReplaySetup,
	reg meta.RegistryReader,
	stores meta.StoreResolver,
	so storage.Options,
) (*sweep.Sweeper, error) {
	cfg := s.Sweep
	if cfg.Grace == 0 && len(cfg.Storages) == 0 {
		cfg = sweep.DefaultConfig()
	}
	so.DryRun = true
	return sweep.NewSweeper(cfg, sweep.SweeperDeps{Registry: reg, Stores: stores, StorageOptions: so})
}
