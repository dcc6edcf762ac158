package ops

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// Env is what the operator commands run with: clients already connected and configured by
// the CLI, so the commands share its configuration story (file, flags, environment).
type Env struct {
	NC    *nats.Conn // optional; JS is built on it when JS is nil
	JS    jetstream.JetStream
	Names subjects.Names
	// OpenReplay opens what replay consults (usually OpenReplayDeps with the process's
	// configuration). Only replay calls it.
	OpenReplay func(ctx context.Context) (*ReplayDeps, error)
}

func (e Env) jetStream() (jetstream.JetStream, error) {
	if e.JS != nil {
		return e.JS, nil
	}
	if e.NC == nil {
		return nil, errors.New("no NATS connection")
	}
	js, err := jetstream.New(e.NC)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	return js, nil
}

// CommandFunc is the shape of every operator command: its own arguments (after the command
// name), output for results on stdout, progress and notes on stderr.
type CommandFunc func(ctx context.Context, env Env, args []string, stdout, stderr io.Writer) error

// Command is one operator command for the CLI's table.
type Command struct {
	Name    string
	Summary string
	Run     CommandFunc
}

// Commands lists the operator commands, to be mounted in the CLI's command table.
func Commands() []Command {
	return []Command{
		{"status", "show streams, consumers, scanner leader and round, last events", StatusCommand},
		{"replay", "re-run a stage's decisions on its recorded input against the current metadata (dry-run)", ReplayCommand},
		{"dlq", "list dead letters (dlq list) or re-publish one (dlq retry --stream S --seq N)", DLQCommand},
		{"pause", "pause a stage: pause <scanner|prober|deleter|all> --for 2h", PauseCommand},
		{"resume", "resume a paused stage: resume <scanner|prober|deleter|all>", ResumeCommand},
	}
}

// ErrUsage wraps argument errors, so the CLI can exit with its usage status.
var ErrUsage = errors.New("usage")

func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parse parses flags and positional arguments in any order ("pause deleter --for 2h" as well
// as "pause --for 2h deleter") and returns the positional ones.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %s: %w", ErrUsage, fs.Name(), err)
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// StatusCommand: status [--json]
func StatusCommand(ctx context.Context, env Env, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("status", stderr)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: status [--json]\n\nStreams, consumers (pending, ack pending, redelivered, paused), the scanner leader, round and\nnext round, and the last event of each kind.")
		fs.PrintDefaults()
	}
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("%w: status takes no arguments, got %q", ErrUsage, pos)
	}
	js, err := env.jetStream()
	if err != nil {
		return err
	}
	rep, err := Status(ctx, js, env.Names)
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(rep)
	}
	return rep.WriteTable(stdout)
}

// ReplayCommand: replay --stage prober|deleter [--from-seq N] [--to-seq N] [--since 1h]
// [--from-time T] [--to-time T] [--instance ID] [--key K] [--dump] [--json] [--no-progress]
func ReplayCommand(ctx context.Context, env Env, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("replay", stderr)
	stage := fs.String("stage", "", "stage whose input to replay: prober (BATCHES), deleter (DELETES) or sweeper (SWEEP)")
	fromSeq := fs.Uint64("from-seq", 0, "first stream sequence (inclusive)")
	toSeq := fs.Uint64("to-seq", 0, "last stream sequence (inclusive)")
	since := fs.Duration("since", 0, "only messages stored within this long before now (e.g. 1h)")
	fromTime := fs.String("from-time", "", "only messages stored at or after this time (RFC 3339)")
	toTime := fs.String("to-time", "", "only messages stored at or before this time (RFC 3339)")
	instance := fs.String("instance", "", "only this KVCM instance id")
	key := fs.String("key", "", "only this block key (signed decimal)")
	file := fs.String("file", "", "sweeper: only this data file (its path as KVCM's URIs name it)")
	dump := fs.Bool("dump", false, "also print each raw message and its headers")
	asJSON := fs.Bool("json", false, "print one JSON object per message, then the summary")
	noProgress := fs.Bool("no-progress", false, "draw no progress bar on stderr")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: replay --stage prober|deleter|sweeper [flags]\n\nReads a stage's input back from its stream with an ordered ephemeral consumer (the durable\nconsumers are not touched) and shows, per location, the decision then (from the recorded\nevents), the rules re-run on the recorded bytes (prober) and the decision now against the\ncurrent metadata; for the sweeper, per data file, what was done then, its fate since and\nwhat a sweeper would do now. Nothing is written.")
		fs.PrintDefaults()
	}
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 1 && *stage == "" {
		*stage = pos[0]
	} else if len(pos) > 0 {
		return fmt.Errorf("%w: replay: unexpected arguments %q", ErrUsage, pos)
	}
	q := ReplayQuery{Stage: *stage, SeqFrom: *fromSeq, SeqTo: *toSeq, Instance: *instance, Dump: *dump, File: *file}
	if *since > 0 {
		q.TimeFrom = time.Now().Add(-*since)
	}
	for _, t := range []struct {
		flag string
		val  string
		dst  *time.Time
	}{{"from-time", *fromTime, &q.TimeFrom}, {"to-time", *toTime, &q.TimeTo}} {
		if t.val == "" {
			continue
		}
		v, err := time.Parse(time.RFC3339, t.val)
		if err != nil {
			return fmt.Errorf("%w: replay --%s: %w", ErrUsage, t.flag, err)
		}
		if t.dst.IsZero() || v.After(*t.dst) {
			*t.dst = v
		}
	}
	if *key != "" {
		k, err := strconv.ParseInt(*key, 10, 64)
		if err != nil {
			return fmt.Errorf("%w: replay --key %q: not a signed 64-bit decimal", ErrUsage, *key)
		}
		q.BlockKey = &k
	}
	if err := q.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	js, err := env.jetStream()
	if err != nil {
		return err
	}
	if env.OpenReplay == nil {
		return errors.New("replay: no metadata configuration")
	}
	deps, err := env.OpenReplay(ctx)
	if err != nil {
		return err
	}
	if deps.Close != nil {
		defer func() { _ = deps.Close() }()
	}
	if !*noProgress {
		deps.Progress = stderr
	}
	sum, err := Replay(ctx, js, env.Names, q, *deps, func(m ReplayMessage) error {
		if *asJSON {
			return jsonLine(stdout, m)
		}
		return WriteReplayMessage(stdout, m)
	})
	if err != nil {
		return err
	}
	if *asJSON {
		return jsonLine(stdout, map[string]any{"summary": sum})
	}
	return sum.WriteTable(stdout)
}

// DLQCommand: dlq list [--since 24h] [--json] | dlq retry --stream S --seq N
func DLQCommand(ctx context.Context, env Env, args []string, stdout, stderr io.Writer) error {
	usage := "usage: dlq list [--since 24h] [--json] | dlq retry --stream BATCHES|DELETES --seq N"
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return fmt.Errorf("%w: dlq: want a subcommand (list, retry)", ErrUsage)
	}
	js, err := env.jetStream()
	if err != nil {
		return err
	}
	switch args[0] {
	case "list", "ls":
		fs := newFlags("dlq list", stderr)
		since := fs.Duration("since", 0, "only dead letters recorded within this long before now (0: all the EVENTS stream holds)")
		asJSON := fs.Bool("json", false, "print JSON")
		pos, err := parse(fs, args[1:])
		if err != nil {
			return err
		}
		if len(pos) > 0 {
			return fmt.Errorf("%w: dlq list: unexpected arguments %q", ErrUsage, pos)
		}
		var from time.Time
		if *since > 0 {
			from = time.Now().Add(-*since)
		}
		dls, err := DLQList(ctx, js, env.Names, from)
		if err != nil {
			return err
		}
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			enc.SetEscapeHTML(false)
			if dls == nil {
				dls = []DeadLetter{}
			}
			return enc.Encode(dls)
		}
		return WriteDeadLetters(stdout, dls)
	case "retry":
		fs := newFlags("dlq retry", stderr)
		stream := fs.String("stream", "", "the stream holding the message: BATCHES, DELETES or the full stream name")
		seq := fs.Uint64("seq", 0, "the message's stream sequence (the SEQ column of dlq list)")
		asJSON := fs.Bool("json", false, "print JSON")
		pos, err := parse(fs, args[1:])
		if err != nil {
			return err
		}
		if len(pos) > 0 || *stream == "" || *seq == 0 {
			return fmt.Errorf("%w: dlq retry needs --stream and --seq", ErrUsage)
		}
		res, err := DLQRetry(ctx, js, env.Names, *stream, *seq)
		if err != nil {
			return err
		}
		if *asJSON {
			return jsonLine(stdout, res)
		}
		_, err = fmt.Fprintf(stdout, "re-published %s #%d (%s) as #%d with msg id %s\n", res.Stream, res.Seq, res.Subject, res.NewSeq, res.NewMsgID)
		return err
	default:
		fmt.Fprintln(stderr, usage)
		return fmt.Errorf("%w: dlq: unknown subcommand %q", ErrUsage, args[0])
	}
}

// PauseCommand: pause <scanner|prober|deleter|all> (--for 2h | --until T)
func PauseCommand(ctx context.Context, env Env, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("pause", stderr)
	dur := fs.Duration("for", 0, "how long to pause (e.g. 2h)")
	until := fs.String("until", "", "pause until this time (RFC 3339), instead of --for")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: pause <scanner|prober|deleter|all> --for 2h | --until 2025-01-02T15:04:05Z\n\nThe prober and deleter are paused with JetStream consumer pause (no replica receives\nanything until then; the stream keeps filling); the scanner skips its ticks. Resume earlier\nwith resume.")
		fs.PrintDefaults()
	}
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: pause takes one stage (scanner, prober, deleter, all)", ErrUsage)
	}
	var end time.Time
	switch {
	case *dur > 0 && *until != "":
		return fmt.Errorf("%w: pause: give --for or --until, not both", ErrUsage)
	case *dur > 0:
		end = time.Now().Add(*dur)
	case *until != "":
		end, err = time.Parse(time.RFC3339, *until)
		if err != nil {
			return fmt.Errorf("%w: pause --until: %w", ErrUsage, err)
		}
	default:
		return fmt.Errorf("%w: pause needs --for or --until", ErrUsage)
	}
	js, err := env.jetStream()
	if err != nil {
		return err
	}
	sts, err := Pause(ctx, js, env.Names, pos[0], end)
	for _, st := range sts {
		fmt.Fprintf(stdout, "%s paused until %s\n", st.Stage, stamp(st.Until, time.Now()))
	}
	return err
}

// ResumeCommand: resume <scanner|prober|deleter|all>
func ResumeCommand(ctx context.Context, env Env, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("resume", stderr)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: resume takes one stage (scanner, prober, deleter, all)", ErrUsage)
	}
	js, err := env.jetStream()
	if err != nil {
		return err
	}
	sts, err := Resume(ctx, js, env.Names, pos[0])
	for _, st := range sts {
		fmt.Fprintf(stdout, "%s resumed\n", st.Stage)
	}
	return err
}
