package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// The operator's commands: each one's flags, help, argument checks and run, on package ops.
// They read the configuration like the stages (the same file serves both), check their
// arguments before they connect, and reach the all-in-one process's embedded server when
// nats.url is empty.

// OperatorCommands lists status, replay, dlq, pause, resume, round, ensure, report and
// counters.
func OperatorCommands() []*Command {
	return []*Command{
		StatusCommand(),
		ReplayCommand(),
		DLQCommand(),
		PauseCommand(),
		ResumeCommand(),
		RoundCommand(),
		EnsureCommand(),
		ReportCommand(),
		CountersCommand(),
	}
}

// RoundCommand: round start [--store S] [--json].
func RoundCommand() *Command {
	return &Command{
		Name:    "round",
		Summary: "start the next round of the stores now: round start [--store S]",
		Help:    "A scanner waits out round_pause between two rounds of a store; round start ends that wait.",
		Sub:     []*Command{roundStartCommand()},
	}
}

func roundStartCommand() *Command {
	var store string
	var asJSON bool
	return &Command{
		Name:    "start",
		Summary: "ask the scanners to start the next round of every store (or --store S) now, not at the end of round_pause",
		Help: "Writes the request in the state bucket; the scanner holding a store's lease starts the store's\n" +
			"next round within seconds if the store is between rounds. A store in a round goes on with it.\n" +
			"After a promotion (dryRun false), it makes the deployment collect now rather than up to\n" +
			"round_pause later. Prints what each store does.",
		Config: true, Tool: true,
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&store, "store", "", "only this metadata store, as status names it (host:port)")
			fs.BoolVar(&asJSON, "json", false, "print JSON")
		},
		Run: func(ctx context.Context, e *Env) error {
			js, names, err := e.opsClients(ctx)
			if err != nil {
				return err
			}
			res, err := ops.RoundStart(ctx, js, names, store, time.Now())
			if errors.Is(err, ops.ErrUnknownStore) {
				return UsageError(err)
			}
			if err != nil {
				return err
			}
			return writeTable(e.Stdout, asJSON, res)
		},
	}
}

// StatusCommand: status [--json].
func StatusCommand() *Command {
	var asJSON bool
	return &Command{
		Name:    "status",
		Summary: "show streams, consumers, every metadata store's walk, last events",
		Help: "Streams, consumers (pending, ack pending, redelivered, paused, and how old each reading is), the\n" +
			"scanner replicas and, for every metadata store, the replica holding its lease (the replicas\n" +
			"divide the stores), its round, progress, estimated end and why it is not moving; the next\n" +
			"round, and the last event of each kind. Every part is read at once, each request bounded by\n" +
			"jetstream.api_timeout; what cannot be read is shown as such (a part the identity's NATS\n" +
			"permissions refuse, at once, naming the subject), and the command then exits 1.",
		Config: true, Tool: true, PerPart: true,
		Flags: func(fs *flag.FlagSet) { fs.BoolVar(&asJSON, "json", false, "print the report as JSON") },
		Run: func(ctx context.Context, e *Env) error {
			js, names, err := e.opsClients(ctx)
			if err != nil {
				return err
			}
			opts := []ops.StatusOption{
				ops.WithCallTimeout(e.Config.JS.APITimeout),
				ops.WithHighWater(e.Config.Scanner.HighWater),
				ops.WithPermissions(e.Permissions()),
				ops.WithDryRun(e.Config.DryRun),
			}
			if e.Config.Prober.CollectDeleting {
				// The stuck DELETING of the last day, from the delete events.
				opts = append(opts, ops.WithStuckDeleting(24*time.Hour))
			}
			rep, err := ops.Status(ctx, js, names, opts...)
			if err != nil {
				return fmt.Errorf("status: %w", err)
			}
			err = writeTable(e.Stdout, asJSON, rep)
			if err == nil && len(rep.Problems) > 0 {
				// Printed with the rest; a script must still see that the report is partial.
				err = ErrReported
			}
			return err
		},
	}
}

// durationFlag is a duration flag that knows whether it was given.
type durationFlag struct {
	d   time.Duration
	set bool
}

func (f *durationFlag) String() string {
	if f == nil || !f.set {
		return ""
	}
	return f.d.String()
}

func (f *durationFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("not a duration (e.g. 30m, 2h)")
	}
	f.d, f.set = d, true
	return nil
}

// stageArg checks the one stage argument of pause and resume.
func stageArg(cmd string, args []string) error {
	stages := append(ops.Stages(), ops.StageAll)
	if len(args) != 1 {
		return fmt.Errorf("%s takes one stage (%s), got %d arguments", cmd, strings.Join(stages, ", "), len(args))
	}
	if !slices.Contains(stages, args[0]) {
		return fmt.Errorf("%s: unknown stage %q (%s)", cmd, args[0], strings.Join(stages, ", "))
	}
	return nil
}

// PauseCommand: pause <scanner|prober|deleter|walker|sweeper|all> [--for 2h | --until T].
func PauseCommand() *Command {
	var dur durationFlag
	var untilText string
	var until time.Time
	return &Command{
		Name:    "pause",
		Summary: "pause a stage until resumed (or --for 2h): pause <scanner|prober|deleter|walker|sweeper|all>",
		Usage:   "<scanner|prober|deleter|walker|sweeper|all> [--for 2h | --until 2025-01-02T15:04:05Z]",
		Help: "The prober, deleter and sweeper are paused with JetStream consumer pause (no replica\n" +
			"receives anything until then; the stream keeps filling); the scanner and the walker skip\n" +
			"their ticks. all pauses every stage. Without --for or --until the pause lasts until\n" +
			"resume: a stage paused while something is investigated never starts again by itself\n" +
			"(the alert KvcmGcStagePausedLong fires after 12 hours of a pause).",
		Config: true, Tool: true, Args: true,
		Flags: func(fs *flag.FlagSet) {
			dur = durationFlag{}
			fs.Var(&dur, "for", "how long to pause, from now (e.g. 30m, 2h; positive)")
			fs.StringVar(&untilText, "until", "", "pause until this time (RFC 3339), instead of --for")
		},
		Check: func(e *Env) error {
			if err := stageArg("pause", e.Args); err != nil {
				return err
			}
			switch {
			case dur.set && untilText != "":
				return errors.New("pause: give --for or --until, not both")
			case dur.set && dur.d <= 0:
				return fmt.Errorf("pause: --for %s: the pause must last a positive time (e.g. 30m, 2h)", dur.d)
			case dur.set:
				until = time.Now().Add(dur.d)
			case untilText != "":
				t, err := time.Parse(time.RFC3339, untilText)
				if err != nil {
					return fmt.Errorf("pause: --until %q: not an RFC 3339 time (e.g. 2025-01-02T15:04:05Z)", untilText)
				}
				if !t.After(time.Now()) {
					return fmt.Errorf("pause: --until %s: the time is not in the future", untilText)
				}
				until = t
			default:
				until = pipeline.UntilResumed(time.Now())
			}
			return nil
		},
		Run: func(ctx context.Context, e *Env) error {
			return e.onStage(ctx, func(js jetstream.JetStream, names subjects.Names, stage string) ([]ops.PauseState, error) {
				return ops.Pause(ctx, js, names, stage, until)
			}, func(st ops.PauseState) string { return "paused " + pipeline.PauseEnd(st.Until, time.Now()) })
		},
	}
}

// ResumeCommand: resume <scanner|prober|deleter|walker|sweeper|all>.
func ResumeCommand() *Command {
	return &Command{
		Name:    "resume",
		Summary: "resume a paused stage: resume <scanner|prober|deleter|walker|sweeper|all>",
		Usage:   "<scanner|prober|deleter|walker|sweeper|all>",
		Help: "Lifts a pause at once: the consumer pause of the prober, the deleter and the " +
			"sweeper, the pause value of the scanner and the walker.",
		Config: true, Tool: true, Args: true,
		Check: func(e *Env) error { return stageArg("resume", e.Args) },
		Run: func(ctx context.Context, e *Env) error {
			return e.onStage(ctx, func(js jetstream.JetStream, names subjects.Names, stage string) ([]ops.PauseState, error) {
				return ops.Resume(ctx, js, names, stage)
			}, func(ops.PauseState) string { return "resumed" })
		},
	}
}

// DLQCommand: dlq list [--since 24h] [--json] | dlq retry --stream S --seq N [--json].
func DLQCommand() *Command {
	return &Command{
		Name:    "dlq",
		Summary: "list dead letters (dlq list) or re-publish one (dlq retry --stream S --seq N)",
		Help:    "Dead letters are messages terminated as poison or after max_deliver failed deliveries.",
		Sub:     []*Command{dlqListCommand(), dlqRetryCommand()},
	}
}

func dlqListCommand() *Command {
	var since time.Duration
	var asJSON bool
	return &Command{
		Name:    "list",
		Summary: "list the dead letters recorded in the EVENTS stream: stage, stream, sequence, reason",
		Config:  true, Tool: true,
		Flags: func(fs *flag.FlagSet) {
			fs.DurationVar(&since, "since", 0, "only dead letters recorded within this long "+
				"before now (0: all the EVENTS stream holds)")
			fs.BoolVar(&asJSON, "json", false, "print JSON")
		},
		Check: func(e *Env) error {
			if since < 0 {
				return fmt.Errorf("dlq list: --since %s: must not be negative", since)
			}
			return nil
		},
		Run: func(ctx context.Context, e *Env) error {
			js, names, err := e.opsClients(ctx)
			if err != nil {
				return err
			}
			dls, err := ops.DLQList(ctx, js, names, sinceTime(since))
			if err != nil {
				return err
			}
			return writeList(e.Stdout, asJSON, dls, ops.WriteDeadLetters)
		},
	}
}

func dlqRetryCommand() *Command {
	var stream string
	var seq uint64
	var asJSON, force bool
	return &Command{
		Name:    "retry",
		Summary: "re-publish a dead letter from its stream under a new message id, after the cause is fixed",
		Help: "A message terminated as poison (it does not decode or does not make sense), or a copy an\n" +
			"earlier retry made that was dead-lettered again, is not re-published: it says why and exits 1.\n" +
			"--force re-publishes it anyway.",
		Config: true, Tool: true,
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&stream, "stream", "", "the stream holding the message: BATCHES, "+
				"DELETES or the full stream name (required)")
			fs.Uint64Var(&seq, "seq", 0, "the message's stream sequence, the SEQ column of dlq list (required)")
			fs.BoolVar(&asJSON, "json", false, "print JSON")
			fs.BoolVar(&force, "force", false, "re-publish even a message terminated as poison, or a copy dead-lettered again")
		},
		Check: func(e *Env) error {
			if stream == "" || seq == 0 {
				return errors.New("dlq retry: needs --stream and --seq")
			}
			return nil
		},
		Run: func(ctx context.Context, e *Env) error {
			js, names, err := e.opsClients(ctx)
			if err != nil {
				return err
			}
			res, err := ops.DLQRetry(ctx, js, names, stream, seq, force)
			if pe := new(ops.PoisonError); errors.As(err, &pe) {
				fmt.Fprintf(e.Stderr, "%s: not re-published: %v\nRe-publish it anyway with --force.\n", e.Prog, pe)
				return ErrReported
			}
			if err != nil {
				return err
			}
			if res.Warning != "" {
				fmt.Fprintf(e.Stderr, "%s: warning: %s; re-published anyway (--force)\n", e.Prog, res.Warning)
			}
			if asJSON {
				return jsonLine(e.Stdout, res)
			}
			_, err = fmt.Fprintf(e.Stdout, "re-published %s #%d (%s) as #%d with msg id %s\n",
				res.Stream, res.Seq, res.Subject, res.NewSeq, res.NewMsgID)
			return err
		},
	}
}

// ReplayCommand: replay --stage prober|deleter|sweeper [selection] [--file PATH] [--dump] [--json] [--no-progress].
func ReplayCommand() *Command {
	var stage, fromTime, toTime, instance, key, file string
	var fromSeq, toSeq uint64
	var since time.Duration
	var dump, asJSON, noProgress bool
	var q ops.ReplayQuery
	return &Command{
		Name:    "replay",
		Summary: "re-run a stage's decisions on its recorded input against the current metadata (dry-run)",
		Usage:   "--stage prober|deleter|sweeper [flags]",
		Help: "Reads a stage's input back from its stream with an ordered ephemeral consumer (the durable\n" +
			"consumers are not touched) and shows, per location, the decision then (from the recorded\n" +
			"events), the rules re-run on the recorded bytes (prober) and the decision now against the\n" +
			"current metadata; for the sweeper, per data file, what was done then, its fate since and\n" +
			"what a sweeper would do now. Nothing is written. The stage may also be given as the one argument.",
		Config: true, Tool: true, Args: true,
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&stage, "stage", "", "stage whose input to replay: prober (BATCHES), "+
				"deleter (DELETES) or sweeper (SWEEP)")
			fs.Uint64Var(&fromSeq, "from-seq", 0, "first stream sequence (inclusive)")
			fs.Uint64Var(&toSeq, "to-seq", 0, "last stream sequence (inclusive)")
			fs.DurationVar(&since, "since", 0, "only messages stored within this long before now (e.g. 1h)")
			fs.StringVar(&fromTime, "from-time", "", "only messages stored at or after this time (RFC 3339)")
			fs.StringVar(&toTime, "to-time", "", "only messages stored at or before this time (RFC 3339)")
			fs.StringVar(&instance, "instance", "", "only this KVCM instance id")
			fs.StringVar(&key, "key", "", "only this block key (signed decimal)")
			fs.StringVar(&file, "file", "", "sweeper: only this data file (its path as KVCM's URIs name it)")
			fs.BoolVar(&dump, "dump", false, "also print each raw message and its headers")
			fs.BoolVar(&asJSON, "json", false, "print one JSON object per message, then the summary")
			fs.BoolVar(&noProgress, "no-progress", false, "draw no progress bar on stderr")
		},
		Check: func(e *Env) error {
			switch {
			case len(e.Args) == 1 && stage == "":
				stage = e.Args[0]
			case len(e.Args) > 0:
				return fmt.Errorf("replay: unexpected arguments %q", e.Args)
			}
			if since < 0 {
				return fmt.Errorf("replay: --since %s: must not be negative", since)
			}
			q = ops.ReplayQuery{Stage: stage, SeqFrom: fromSeq, SeqTo: toSeq, Instance: instance, Dump: dump, File: file,
				TimeFrom: sinceTime(since)}
			for _, t := range []struct {
				flag string
				val  string
				dst  *time.Time
			}{{"from-time", fromTime, &q.TimeFrom}, {"to-time", toTime, &q.TimeTo}} {
				if t.val == "" {
					continue
				}
				v, err := time.Parse(time.RFC3339, t.val)
				if err != nil {
					return fmt.Errorf("replay: --%s %q: not an RFC 3339 time", t.flag, t.val)
				}
				if t.dst.IsZero() || v.After(*t.dst) {
					*t.dst = v
				}
			}
			if key != "" {
				k, err := strconv.ParseInt(key, 10, 64)
				if err != nil {
					return fmt.Errorf("replay: --key %q: not a signed 64-bit decimal", key)
				}
				q.BlockKey = &k
			}
			if err := q.Validate(); err != nil {
				return err
			}
			return nil
		},
		Run: func(ctx context.Context, e *Env) error {
			o, err := app.OptionsOf(e.Config)
			if err != nil {
				return UsageError(fmt.Errorf("configuration: %w", err))
			}
			js, names, err := e.opsClients(ctx)
			if err != nil {
				return err
			}
			deps, err := ops.OpenReplayDeps(ctx, ops.ReplaySetup{Cluster: o.Cluster, Registry: o.Registry, Meta: o.Meta,
				MetaURIs: o.MetaURIs, GroupStoreURIs: o.GroupStoreURIs, Storage: o.Storage, Prober: o.Prober, Sweep: o.Sweep,
				Guard: o.Guard, GuardConn: o.GuardConn, GuardKeyPrefix: o.GuardKeyPrefix, Logger: e.Logger})
			if err != nil {
				return err
			}
			if deps.Close != nil {
				defer func() { _ = deps.Close() }()
			}
			if !noProgress {
				deps.Progress = e.Stderr
			}
			sum, err := ops.Replay(ctx, js, names, q, *deps, func(m ops.ReplayMessage) error {
				if asJSON {
					return jsonLine(e.Stdout, m)
				}
				return ops.WriteReplayMessage(e.Stdout, m)
			})
			if err != nil {
				return err
			}
			if asJSON {
				return jsonLine(e.Stdout, map[string]any{"summary": sum})
			}
			return sum.WriteTable(e.Stdout)
		},
	}
}

// onStage runs pause or resume on the stage argument and prints a line per stage it reached.
func (e *Env) onStage(
	ctx context.Context,
	do func(jetstream.JetStream, subjects.Names, string) ([]ops.PauseState, error),
	line func(ops.PauseState) string,
) error {
	js, names, err := e.opsClients(ctx)
	if err != nil {
		return err
	}
	sts, err := do(js, names, e.Args[0])
	for _, st := range sts {
		fmt.Fprintf(e.Stdout, "%s %s\n", st.Stage, line(st))
	}
	return err
}

// opsClients connects to JetStream for an operator's command, with the names it works on.
func (e *Env) opsClients(ctx context.Context) (jetstream.JetStream, subjects.Names, error) {
	names, err := e.Names()
	if err != nil {
		return nil, names, err
	}
	js, err := e.JetStream(ctx)
	return js, names, err
}

// sinceTime is where a --since window starts: the zero time, everything, for 0.
func sinceTime(since time.Duration) time.Time {
	if since <= 0 {
		return time.Time{}
	}
	return time.Now().Add(-since)
}

// writeTable prints r as JSON or as its table.
func writeTable(w io.Writer, asJSON bool, r interface{ WriteTable(io.Writer) error }) error {
	if asJSON {
		return writeJSON(w, r)
	}
	return r.WriteTable(w)
}

// writeList prints list as JSON (an empty list as [], not null) or as text by write.
func writeList[T any](w io.Writer, asJSON bool, list []T, write func(io.Writer, []T) error) error {
	if !asJSON {
		return write(w, list)
	}
	if list == nil {
		list = []T{}
	}
	return writeJSON(w, list)
}

// writeJSON prints v indented, without HTML escaping.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// jsonLine prints v on one line, without HTML escaping.
func jsonLine(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
