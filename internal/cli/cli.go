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

	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/config"
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

// ErrInterrupted: a command was stopped by a signal before it finished what it does by
// itself (a demo, a seed). A stage process stopped by a signal has finished: that is success.
var ErrInterrupted = errors.New("interrupted")

// Command is one command: a subcommand of kvcm-gc, or the whole of a single-stage binary.
type Command struct {
	Name    string
	Summary string // one line, for the command list
	// Usage is what follows the command name in the synopsis, e.g. "[flags]".
	Usage string
	// Config: the command reads the configuration (--config file, environment, a flag per key).
	Config bool
	// Flags registers the command's own flags; their values are read by Run through the
	// variables Flags bound them to.
	Flags func(fs *flag.FlagSet)
	// Args: the command parses its remaining arguments itself (Env.Args). Configuration
	// flags may still appear anywhere on the command line and are taken out first.
	Args bool
	Run  func(ctx context.Context, e *Env) error
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
}

// Names returns the stream, subject and bucket names of the configuration.
func (e *Env) Names() (subjects.Names, error) {
	if err := e.Config.Require(config.Needs{}); err != nil {
		return subjects.Names{}, err
	}
	return e.Config.Names()
}

// Main dispatches args (without the program name) to one of cmds and returns the exit
// status. "help", "-h" and "--help" list the commands; "help <command>" documents one.
func Main(prog string, cmds []*Command, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		listCommands(stderr, prog, cmds)
		return ExitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(rest) == 1 {
			if c := find(cmds, rest[0]); c != nil {
				return RunCommand(prog+" "+c.Name, c, []string{"--help"}, stdout, stderr)
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

// RunCommand parses args for c, loads the configuration, runs c until it returns or a signal
// (SIGINT, SIGTERM) cancels its context, and returns the exit status. A second signal kills
// the process at once.
func RunCommand(prog string, c *Command, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(prog, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	own := flag.NewFlagSet(prog, flag.ContinueOnError)
	if c.Flags != nil {
		c.Flags(own)
	}
	own.VisitAll(func(f *flag.Flag) { fs.Var(f.Value, f.Name, f.Usage) })
	var cf *config.Flags
	if c.Config {
		cf = config.AddFlags(fs)
	}
	usage := func(w io.Writer) { writeUsage(w, prog, c, own) }

	var pass []string
	var err error
	helpToCommand := false
	if c.Args {
		args, pass, err = split(fs, args)
		// The command documents its own arguments: its usage comes first, then ours.
		helpToCommand = slices.ContainsFunc(pass, func(a string) bool { n, _ := flagName(a); return n == "h" || n == "help" })
	}
	if err == nil {
		err = fs.Parse(args)
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		usage(stdout)
		return ExitOK
	case err != nil:
		fmt.Fprintf(stderr, "%s: %v\n(run '%s --help' for every flag)\n", prog, err, prog)
		return ExitUsage
	case !c.Args && fs.NArg() > 0:
		fmt.Fprintf(stderr, "%s: unexpected arguments %q\n", prog, fs.Args())
		return ExitUsage
	}
	pass = append(pass, fs.Args()...)

	e := &Env{Prog: prog, Name: c.Name, Args: pass, Stdout: stdout, Stderr: stderr}
	logCfg := config.Default().Log
	if cf != nil && helpToCommand {
		e.Config = config.Default()
	} else if cf != nil {
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
	e.Logger = NewLogger(stderr, logCfg).With("process", c.Name)
	// The Redis client logs connection-pool failures on its own; they belong in the process's
	// structured log, not as bare lines on stderr.
	redis.SetLogger(redisLog{e.Logger})

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // the next signal gets the default behaviour: the process dies
	}()
	err = c.Run(ctx, e)
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, flag.ErrHelp):
		usage(stdout)
		return ExitOK
	case errors.Is(err, ErrUsage):
		fmt.Fprintf(stderr, "%s: %v\n", prog, indent(err.Error()))
		return ExitUsage
	case errors.Is(err, ErrInterrupted) || (ctx.Err() != nil && errors.Is(err, context.Canceled)):
		fmt.Fprintf(stderr, "%s: interrupted\n", prog)
		return ExitInterrupted
	default:
		fmt.Fprintf(stderr, "%s: %v\n", prog, indent(err.Error()))
		return ExitFailure
	}
}

// split takes the flags fs knows out of args, wherever they are, and returns them apart from
// everything else (kept in order), so a command that parses its own arguments still takes
// every configuration flag. A "--" ends the flags fs may take.
func split(fs *flag.FlagSet, args []string) (mine, rest []string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return mine, append(rest, args[i+1:]...), nil
		}
		name, hasValue := flagName(a)
		f := fs.Lookup(name)
		if f == nil {
			rest = append(rest, a)
			continue
		}
		mine = append(mine, a)
		if !hasValue && !isBool(f) {
			if i+1 >= len(args) {
				return nil, nil, fmt.Errorf("flag needs an argument: -%s", name)
			}
			i++
			mine = append(mine, args[i])
		}
	}
	return mine, rest, nil
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

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

func writeUsage(w io.Writer, prog string, c *Command, own *flag.FlagSet) {
	usage := c.Usage
	if usage == "" {
		usage = "[flags]"
	}
	fmt.Fprintf(w, "usage: %s %s\n\n%s\n", prog, usage, c.Summary)
	hasOwn := false
	own.VisitAll(func(*flag.Flag) { hasOwn = true })
	if hasOwn {
		fmt.Fprintln(w, "\nFlags:")
		own.SetOutput(w)
		own.PrintDefaults()
	}
	if c.Config {
		fmt.Fprintf(w, "\n  --config file\n      YAML configuration file (env %s)\n  --print-config\n      print the effective configuration, secrets hidden, and exit\n\n", config.FileEnv)
		config.WriteHelp(w)
	}
}

// redisLog adapts the process logger to the Redis client's logger interface.
type redisLog struct{ log *slog.Logger }

func (r redisLog) Printf(ctx context.Context, format string, v ...any) {
	r.log.WarnContext(ctx, "redis client", "line", fmt.Sprintf(format, v...))
}

// indent puts every line of a multi-line error after the first under it.
func indent(s string) string { return strings.ReplaceAll(s, "\n", "\n  ") }
