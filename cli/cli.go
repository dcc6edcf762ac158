// Package cli is what every kvcm-gc binary shares: command dispatch, flag parsing with the
// configuration (file, environment, one flag per key), logging, signal handling, the NATS
// connection and the process that runs stages behind an HTTP endpoint. The mains only list
// their commands.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/config"
	"github.com/kvcm-gc/kvcm-gc/internal/natsperm"
	"github.com/kvcm-gc/kvcm-gc/internal/version"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// Exit statuses.
const (
	ExitOK          = 0
	ExitFailure     = 1
	ExitUsage       = 2   // bad command line or configuration
	ExitInterrupted = 130 // stopped by a signal before the work was done
)

// ErrUsage marks an error of the command line or the configuration: the process exits with
// ExitUsage. Wrap it with UsageError to keep the word out of the message.
var ErrUsage = errors.New("usage")

// UsageError marks err as a command-line or configuration error (errors.Is(e, ErrUsage)).
func UsageError(err error) error { return usageError{err} }

type usageError struct{ err error }

func (u usageError) Error() string        { return u.err.Error() }
func (u usageError) Unwrap() error        { return u.err }
func (u usageError) Is(target error) bool { return target == ErrUsage }

// ErrReported: the command failed and has printed why (ensure's differing fields); it exits
// with ExitFailure and nothing more is said.
var ErrReported = errors.New("failed, as reported")

// ErrInterrupted: a command was stopped by a signal before it finished what it does by
// itself (a demo, a seed). A stage process stopped by a signal has finished: that is success.
var ErrInterrupted = errors.New("interrupted")

// Command is one command: a subcommand of kvcm-gc, or the whole of a single-stage binary. Its
// flags, its help and what it does are declared here together; the mains list commands in a
// table and Main dispatches to them.
type Command struct {
	Name    string
	Summary string // one line, for the command list
	// Usage is what follows the command name in the synopsis, e.g. "<stage> [flags]"; empty
	// means "[flags]".
	Usage string
	// Help is said after the summary in --help: what the command does, in a few lines.
	Help string
	// Config: the command reads the configuration (--config file, environment, a flag per key).
	Config bool
	// Flags registers the command's own flags; Check and Run read them through the variables
	// Flags bound them to.
	Flags func(fs *flag.FlagSet)
	// Args: the command takes positional arguments (Env.Args). Its own flags and the
	// configuration flags may come before, between or after them.
	Args bool
	// Tool marks an operator's command (status, pause, …): it needs the cluster (checked with
	// the arguments), logs warnings and errors only (debug when log.level says so), and with
	// nats.url empty it connects to the all-in-one process's embedded server at
	// nats.embedded.listen. A refusal of the NATS server for lack of permission ends it at once,
	// with an error naming the subject and the identity, unless PerPart.
	Tool bool
	// PerPart: the operator's command reads parts that fail apart (status): a refusal ends only
	// the part that needed the subject, which the command guards itself (Env.Permissions).
	PerPart bool
	// Check validates the flags and arguments before anything connects; what it returns is
	// a usage error (exit status 2).
	Check func(e *Env) error
	// Sub lists subcommands; the first argument picks one (dlq list, dlq retry).
	Sub []*Command
	Run func(ctx context.Context, e *Env) error
}

// Env is what a command runs with.
type Env struct {
	Prog   string // "kvcm-gc scanner", for messages
	Name   string // the command name
	Config config.Config
	Args   []string
	Stdout io.Writer
	Stderr io.Writer
	Logger *slog.Logger

	tool bool
	nc   *nats.Conn
	perm *natsperm.Watcher
}

// Permissions watches the command's NATS connection for refusals (a Tool command's; nil
// otherwise): Guard a context to end it with the refusal of a subject it needs.
func (e *Env) Permissions() *natsperm.Watcher { return e.perm }

// Names returns the stream, subject and bucket names of the configuration.
func (e *Env) Names() (subjects.Names, error) {
	if err := e.Config.Require(config.Needs{}); err != nil {
		return subjects.Names{}, UsageError(fmt.Errorf("configuration: %w", err))
	}
	return e.Config.Names()
}

// Main dispatches args (without the program name) to one of cmds and returns the exit
// status. "help", "-h" and "--help" list the commands; "help <command> [subcommand]"
// documents one; "--version" prints the version.
func Main(prog string, cmds []*Command, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		listCommands(stderr, prog, cmds)
		return ExitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "-version", "--version":
		version.Get().Write(stdout, prog)
		return ExitOK
	case "help", "-h", "-help", "--help":
		if len(rest) >= 1 {
			if c := find(cmds, rest[0]); c != nil {
				args := []string{"--help"}
				if len(c.Sub) > 0 && len(rest) > 1 {
					args = []string{rest[1], "--help"} // help dlq list
				}
				return RunCommand(prog+" "+c.Name, c, args, stdout, stderr)
			}
		}
		listCommands(stdout, prog, cmds)
		return ExitOK
	}
	c := find(cmds, name)
	if c == nil {
		fmt.Fprintf(stderr, "%s: unknown command %q\n\n", prog, name)
		listCommands(stderr, prog, cmds)
		return ExitUsage
	}
	return RunCommand(prog+" "+c.Name, c, rest, stdout, stderr)
}

func find(cmds []*Command, name string) *Command {
	i := slices.IndexFunc(cmds, func(c *Command) bool { return c.Name == name })
	if i < 0 {
		return nil
	}
	return cmds[i]
}

func listCommands(w io.Writer, prog string, cmds []*Command) {
	fmt.Fprintf(w, "usage: %s <command> [flags]\n\nCommands:\n", prog)
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-10s %s\n", c.Name, c.Summary)
	}
	fmt.Fprintf(w, "\nRun '%s help <command>' for its flags and configuration keys.\n", prog)
}

// isHelp reports whether a is -h, -help, --h or --help.
func isHelp(a string) bool {
	n, _ := flagName(a)
	return (n == "h" || n == "help") && strings.HasPrefix(a, "-")
}

// RunCommand parses args for c, loads the configuration, checks the arguments, runs c until it
// returns or a signal (SIGINT, SIGTERM) cancels its context, and returns the exit status. A
// second signal kills the process at once.
//
// Errors of the command line and the configuration are printed as such, with a pointer to
// --help, and exit with ExitUsage. In a command that reads the configuration, every other
// error that ends it goes through the configured logger (JSON with log.format json).
func RunCommand(prog string, c *Command, args []string, stdout, stderr io.Writer) int {
	if len(c.Sub) > 0 {
		return runParent(prog, c, args, stdout, stderr)
	}
	fs := flag.NewFlagSet(prog, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if c.Flags != nil {
		c.Flags(fs)
	}
	own := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { own[f.Name] = true })
	var cf *config.Flags
	if c.Config {
		cf = config.AddFlags(fs)
	}
	usage := func(w io.Writer) { writeUsage(w, prog, c, fs, own) }
	usageErr := func(err error) int {
		fmt.Fprintf(stderr, "%s: %v\n(run '%s --help' for usage)\n", prog, indent(err.Error()), prog)
		return ExitUsage
	}

	pos, err := parseInterleaved(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		usage(stdout)
		return ExitOK
	case err != nil:
		return usageErr(err)
	case !c.Args && len(pos) > 0:
		return usageErr(fmt.Errorf("unexpected arguments %q", pos))
	}

	e := &Env{Prog: prog, Name: c.Name, Args: pos, Stdout: stdout, Stderr: stderr, tool: c.Tool}
	logCfg := config.Default().Log
	if cf != nil {
		e.Config, err = cf.Load(os.LookupEnv)
		if err != nil {
			fmt.Fprintf(stderr, "%s: configuration: %v\n", prog, indent(err.Error()))
			return ExitUsage
		}
		if cf.Print {
			if err := e.Config.Print(stdout); err != nil {
				fmt.Fprintf(stderr, "%s: %v\n", prog, err)
				return ExitFailure
			}
			return ExitOK
		}
		logCfg = e.Config.Log
	}
	if c.Tool && logCfg.Level != "debug" && logCfg.Level != "error" {
		// An operator's command prints its results; the process's info lines (connected to
		// NATS, …) would only get in their way.
		logCfg.Level = "warn"
	}
	e.Logger = NewLogger(stderr, logCfg).With("process", c.Name)
	defer e.close()

	if c.Check != nil {
		if err := c.Check(e); err != nil {
			return usageErr(err)
		}
	}
	if c.Tool {
		// An operator's command works on the names of the configuration.
		if _, err := e.Names(); err != nil {
			return usageErr(err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // the next signal gets the default behaviour: the process dies
	}()
	runCtx := ctx
	if c.Tool {
		// A permission is not something waiting brings: the command ends at the server's
		// first refusal, with an error naming the subject and the identity, instead of
		// waiting out each request's timeout (and ensure retrying them for minutes).
		e.perm = natsperm.New(Identity(e.Config.NATS))
		if !c.PerPart {
			var unguard context.CancelFunc
			runCtx, unguard = e.perm.Guard(ctx, ">")
			defer unguard()
		}
	}
	err = natsperm.Cause(runCtx, c.Run(runCtx, e))
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, flag.ErrHelp):
		usage(stdout)
		return ExitOK
	case errors.Is(err, ErrUsage):
		return usageErr(err)
	case errors.Is(err, ErrReported):
		return ExitFailure
	case errors.Is(err, ErrInterrupted) || (ctx.Err() != nil && errors.Is(err, context.Canceled)):
		if c.Config {
			e.Logger.Warn("interrupted", "err", err)
		} else {
			fmt.Fprintf(stderr, "%s: interrupted\n", prog)
		}
		return ExitInterrupted
	case c.Config:
		e.Logger.Error("exiting on error", "err", err)
		return ExitFailure
	default:
		// A command without a configuration (seed, demo) has no configured logger: its
		// errors are lines for the person who typed it.
		fmt.Fprintf(stderr, "%s: %v\n", prog, indent(err.Error()))
		return ExitFailure
	}
}

// runParent dispatches to the subcommand named by the first argument.
func runParent(prog string, c *Command, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || isHelp(args[0]) {
		w, code := stdout, ExitOK
		if len(args) == 0 {
			w, code = stderr, ExitUsage
		}
		fmt.Fprintf(w, "usage: %s <subcommand> [flags]\n\n%s\n", prog, c.Summary)
		if c.Help != "" {
			fmt.Fprintf(w, "\n%s\n", c.Help)
		}
		fmt.Fprintln(w, "\nSubcommands:")
		for _, s := range c.Sub {
			fmt.Fprintf(w, "  %-8s %s\n", s.Name, s.Summary)
		}
		fmt.Fprintf(w, "\nRun '%s <subcommand> --help' for its flags.\n", prog)
		return code
	}
	sub := find(c.Sub, args[0])
	if strings.HasPrefix(args[0], "-") {
		fmt.Fprintf(stderr, "%s: the subcommand (%s) comes first, before %s\n(run '%s --help' for usage)\n",
			prog, subNames(c), args[0], prog)
		return ExitUsage
	}
	if sub == nil {
		fmt.Fprintf(stderr, "%s: unknown subcommand %q (%s)\n(run '%s --help' for usage)\n", prog, args[0], subNames(c), prog)
		return ExitUsage
	}
	return RunCommand(prog+" "+sub.Name, sub, args[1:], stdout, stderr)
}

func subNames(c *Command) string {
	var names []string
	for _, s := range c.Sub {
		names = append(names, s.Name)
	}
	return strings.Join(names, ", ")
}

// parseInterleaved parses flags and positional arguments in any order ("pause deleter --for
// 2h" as well as "pause --for 2h deleter") and returns the positional ones, in order. A "--"
// ends the flags.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// JetStream returns a JetStream context on the command's NATS connection, connecting on the
// first call (Env.ConnectNATS); RunCommand closes the connection when the command ends.
func (e *Env) JetStream(ctx context.Context) (jetstream.JetStream, error) {
	if e.nc == nil {
		nc, err := e.ConnectNATS(ctx)
		if err != nil {
			return nil, err
		}
		e.nc = nc
	}
	timeout := e.Config.JS.APITimeout
	if timeout <= 0 {
		timeout = subjects.DefaultCallTimeout
	}
	js, err := jetstream.New(e.nc, jetstream.WithDefaultTimeout(timeout))
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	return js, nil
}

func (e *Env) close() {
	if e.nc != nil {
		e.nc.Close()
		e.nc = nil
	}
}

// flagName returns the name of a "-name", "--name" or "--name=value" argument ("" if a is no
// flag) and whether the value is attached.
func flagName(a string) (string, bool) {
	if len(a) < 2 || a[0] != '-' {
		return "", false
	}
	a = strings.TrimPrefix(a[1:], "-")
	name, _, hasValue := strings.Cut(a, "=")
	return name, hasValue
}

// writeUsage prints a command's help: the synopsis, what it does, its own flags, then (for
// commands that read it) the configuration.
func writeUsage(w io.Writer, prog string, c *Command, fs *flag.FlagSet, own map[string]bool) {
	usage := c.Usage
	if usage == "" {
		usage = "[flags]"
	}
	fmt.Fprintf(w, "usage: %s %s\n\n%s\n", prog, usage, c.Summary)
	if c.Help != "" {
		fmt.Fprintf(w, "\n%s\n", c.Help)
	}
	if len(own) > 0 {
		mine := flag.NewFlagSet(prog, flag.ContinueOnError)
		fs.VisitAll(func(f *flag.Flag) {
			if own[f.Name] {
				mine.Var(f.Value, f.Name, f.Usage)
			}
		})
		fmt.Fprintln(w, "\nFlags:")
		mine.SetOutput(w)
		mine.PrintDefaults()
	}
	if c.Config {
		fmt.Fprintf(w, "\n  --config file\n      YAML configuration file (env %s)\n  "+
			"--print-config\n      print the effective configuration, secrets hidden, and exit\n\n", config.FileEnv)
		config.WriteHelp(w)
	}
}

// indent puts every line of a multi-line error after the first under it.
func indent(s string) string { return strings.ReplaceAll(s, "\n", "\n  ") }
