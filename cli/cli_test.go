package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/config"
)

func TestParseInterleaved(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	config.AddFlags(fs)
	var json bool
	var dur string
	fs.BoolVar(&json, "json", false, "")
	fs.StringVar(&dur, "for", "", "")
	tests := []struct {
		name string
		args []string
		pos  []string
	}{
		{"nothing", nil, nil},
		{"flags after the argument", []string{"deleter", "--for", "2h", "--json"}, []string{"deleter"}},
		{"flags before and between", []string{"--json", "a", "--cluster", "c1", "b", "--for=1h"}, []string{"a", "b"}},
		{"double dash ends the flags", []string{"a", "--", "--for", "x"}, []string{"a", "--for", "x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pos, err := parseInterleaved(fs, tt.args)
			require.NoError(t, err)
			require.Equal(t, tt.pos, pos)
		})
	}
	_, err := parseInterleaved(fs, []string{"x", "--for"})
	require.ErrorContains(t, err, "needs an argument")
	_, err = parseInterleaved(fs, []string{"--help"})
	require.ErrorIs(t, err, flag.ErrHelp)
}

// run runs c with args and an environment free of KVCMGC_ variables.
func run(t *testing.T, c *Command, args ...string) (int, string, string) {
	t.Helper()
	for _, k := range config.Keys() {
		t.Setenv(k.Env, "")
	}
	t.Setenv(config.FileEnv, "")
	var out, errOut bytes.Buffer
	code := RunCommand("kvcm-gc test", c, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestRunCommandExitStatus(t *testing.T) {
	var seen *Env
	ok := &Command{Name: "ok", Config: true, Run: func(_ context.Context, e *Env) error { seen = e; return nil }}
	tests := []struct {
		name   string
		cmd    *Command
		args   []string
		code   int
		stderr string
	}{
		{"success", ok, []string{"--cluster", "c1"}, ExitOK, ""},
		{"unknown flag", ok, []string{"--nope"}, ExitUsage, "flag provided but not defined: -nope"},
		{"stray argument", ok, []string{"extra"}, ExitUsage, "unexpected arguments"},
		{"bad value names the key", ok, []string{"--orphan_writing_grace", "10m"}, ExitUsage, "orphan_writing_grace: must be >= 1h"},
		{"unreadable file", ok, []string{"--config", "/nonexistent/kvcm-gc.yaml"}, ExitUsage, "load config /nonexistent/kvcm-gc.yaml"},
		{"failure", &Command{Name: "f", Run: func(context.Context, *Env) error { return errors.New("boom") }}, nil, ExitFailure, "boom"},
		{"usage error from run", &Command{Name: "u", Run: func(context.Context, *Env) error { return UsageError(errors.New("bad")) }}, nil, ExitUsage, "test: bad"},
		{"interrupted", &Command{Name: "i", Run: func(context.Context, *Env) error { return ErrInterrupted }}, nil, ExitInterrupted, "interrupted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := run(t, tt.cmd, tt.args...)
			require.Equal(t, tt.code, code, stderr)
			require.Contains(t, stderr, tt.stderr)
		})
	}
	run(t, ok, "--cluster", "c1", "--scan_interval", "3s")
	require.Equal(t, "c1", seen.Config.Cluster)
	require.Equal(t, 3*time.Second, seen.Config.Scanner.ScanInterval)
	require.Equal(t, "ok", seen.Name)
}

func TestHelpDocumentsEveryKeyAndNoSecret(t *testing.T) {
	var n int
	c := &Command{Name: "stage", Summary: "runs a stage", Config: true,
		Flags: func(fs *flag.FlagSet) { fs.IntVar(&n, "own", 3, "a flag of the command's own") },
		Run:   func(context.Context, *Env) error { return nil }}
	t.Setenv("KVCMGC_NATS_PASSWORD", "s3cret")
	var out bytes.Buffer
	require.Equal(t, ExitOK, RunCommand("kvcm-gc stage", c, []string{"--help"}, &out, &out))
	help := out.String()
	require.Contains(t, help, "runs a stage")
	require.Contains(t, help, "-own")
	for _, k := range config.Keys() {
		require.Contains(t, help, "--"+k.Flag()+" ", k.Name)
		require.Contains(t, help, k.Env, k.Name)
	}
	require.Contains(t, help, "default 24h0m0s; env KVCMGC_ORPHAN_WRITING_GRACE")
	require.NotContains(t, help, "s3cret")

	out.Reset()
	require.Equal(t, ExitOK, RunCommand("kvcm-gc stage", c, []string{"--print-config", "--registry.uri", "redis://u:pw1@r:1", "--nats.user", "n"}, &out, &out))
	require.Contains(t, out.String(), "password: '***'")
	require.Contains(t, out.String(), "redis://***@r:1")
	require.NotContains(t, out.String(), "s3cret")
	require.NotContains(t, out.String(), "pw1")

	// A secret read from its file is hidden as well; the file's name is not.
	secret := filepath.Join(t.TempDir(), "pw")
	require.NoError(t, os.WriteFile(secret, []byte("file-pw-9\n"), 0o600))
	out.Reset()
	require.Equal(t, ExitOK, RunCommand("kvcm-gc stage", c, []string{"--print-config", "--nats.user", "n", "--registry.password_file", secret, "--meta.password_file", secret}, &out, &out), out.String())
	require.Contains(t, out.String(), "password_file: "+secret)
	require.Equal(t, 3, strings.Count(out.String(), "password: '***'"), "registry, meta, nats")
	require.NotContains(t, out.String(), "file-pw-9")

	// Both ways: a configuration error naming both keys (exit 2), the secret not in it.
	out.Reset()
	require.Equal(t, ExitUsage, RunCommand("kvcm-gc stage", c, []string{"--registry.password", "file-pw-9", "--registry.password_file", secret}, &out, &out))
	require.Contains(t, out.String(), "registry.password, registry.password_file: both set")
	require.NotContains(t, out.String(), "file-pw-9")
}

func TestArgsCommand(t *testing.T) {
	var got *Env
	var dur time.Duration
	checked := false
	c := &Command{Name: "pause", Summary: "pause a stage", Usage: "<stage> --for 2h", Help: "Longer help.", Config: true, Args: true,
		Flags: func(fs *flag.FlagSet) { fs.DurationVar(&dur, "for", 0, "how long") },
		Check: func(e *Env) error {
			checked = true
			if len(e.Args) != 1 {
				return errors.New("one stage")
			}
			return nil
		},
		Run: func(_ context.Context, e *Env) error { got = e; return nil }}
	code, _, stderr := run(t, c, "deleter", "--cluster", "c1", "--for", "2h")
	require.Equal(t, ExitOK, code, stderr)
	require.True(t, checked)
	require.Equal(t, []string{"deleter"}, got.Args)
	require.Equal(t, 2*time.Hour, dur)
	require.Equal(t, "c1", got.Config.Cluster)

	// Check's errors are usage errors, and Run does not start.
	got = nil
	code, _, stderr = run(t, c, "--for", "2h")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, stderr, "kvcm-gc test: one stage\n(run 'kvcm-gc test --help' for usage)")
	require.Nil(t, got)

	// --help comes before the configuration, which need not load; usage first, then the
	// command's help and flags, then the configuration keys.
	code, out, _ := run(t, c, "--help", "--config", "/nonexistent.yaml")
	require.Equal(t, ExitOK, code)
	require.True(t, strings.HasPrefix(out, "usage: kvcm-gc test <stage> --for 2h\n\npause a stage\n\nLonger help.\n\nFlags:\n  -for duration"), out)
	require.Contains(t, out, "orphan_writing_grace", "the configuration keys follow the command's own usage")
	require.Less(t, strings.Index(out, "-for"), strings.Index(out, "--config file"))
}

func TestSubcommands(t *testing.T) {
	var ran string
	var n int
	sub := func(name string) *Command {
		return &Command{Name: name, Summary: "does " + name, Flags: func(fs *flag.FlagSet) { fs.IntVar(&n, name+"-n", 0, "a number") },
			Run: func(context.Context, *Env) error { ran = name; return nil }}
	}
	c := &Command{Name: "dlq", Summary: "dead letters", Sub: []*Command{sub("list"), sub("retry")}}
	code, _, stderr := run(t, c, "retry", "--retry-n", "3")
	require.Equal(t, ExitOK, code, stderr)
	require.Equal(t, "retry", ran)
	require.Equal(t, 3, n)

	code, _, stderr = run(t, c)
	require.Equal(t, ExitUsage, code)
	require.Contains(t, stderr, "Subcommands:\n  list     does list\n  retry    does retry")
	code, _, stderr = run(t, c, "purge")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, stderr, `unknown subcommand "purge" (list, retry)`)
	code, out, _ := run(t, c, "list", "--help")
	require.Equal(t, ExitOK, code)
	require.Contains(t, out, "usage: kvcm-gc test list [flags]")
	require.Contains(t, out, "-list-n int", "a subcommand's help lists its flags")

	var buf bytes.Buffer
	require.Equal(t, ExitOK, Main("kvcm-gc", []*Command{c}, []string{"help", "dlq", "retry"}, &buf, &buf))
	require.Contains(t, buf.String(), "-retry-n int")
}

// TestFatalErrorThroughLogger: an error that ends a command after the configuration is loaded
// goes through the configured logger, JSON with log.format json.
func TestFatalErrorThroughLogger(t *testing.T) {
	c := &Command{Name: "stage", Config: true, Run: func(context.Context, *Env) error { return errors.New("ensure stream: boom") }}
	code, _, stderr := run(t, c, "--log.format", "json")
	require.Equal(t, ExitFailure, code)
	var line map[string]any
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(stderr)), &line), stderr)
	require.Equal(t, "ERROR", line["level"])
	require.Equal(t, "exiting on error", line["msg"])
	require.Equal(t, "ensure stream: boom", line["err"])
	require.Equal(t, "stage", line["process"])
}

// TestToolLogLevel: an operator's command logs no info lines unless log.level is debug.
func TestToolLogLevel(t *testing.T) {
	c := &Command{Name: "status", Config: true, Tool: true, Run: func(_ context.Context, e *Env) error {
		e.Logger.Info("nats connected")
		e.Logger.Warn("something odd")
		return nil
	}}
	code, _, stderr := run(t, c, "--cluster", "c1")
	require.Equal(t, ExitOK, code, stderr)
	require.NotContains(t, stderr, "nats connected")
	require.Contains(t, stderr, "something odd")
	_, _, stderr = run(t, c, "--cluster", "c1", "--log.level", "debug")
	require.Contains(t, stderr, "nats connected")
}

func TestEmbeddedURL(t *testing.T) {
	for listen, want := range map[string]string{
		"127.0.0.1:4222": "nats://127.0.0.1:4222", "0.0.0.0:4333": "nats://127.0.0.1:4333", ":4444": "nats://127.0.0.1:4444",
		"[::]:4555": "nats://127.0.0.1:4555", "nats.local:4222": "nats://nats.local:4222",
	} {
		got, err := EmbeddedURL(config.EmbeddedJS{Listen: listen})
		require.NoError(t, err, listen)
		require.Equal(t, want, got, listen)
	}
	_, err := EmbeddedURL(config.EmbeddedJS{Listen: "127.0.0.1:0"})
	require.ErrorContains(t, err, "nats.url: required")
}

func TestDispatch(t *testing.T) {
	cmds := []*Command{{Name: "a", Summary: "does a", Run: func(context.Context, *Env) error { return nil }}}
	tests := []struct {
		args []string
		code int
		out  string
	}{
		{nil, ExitUsage, "usage: kvcm-gc <command>"},
		{[]string{"help"}, ExitOK, "does a"},
		{[]string{"--help"}, ExitOK, "does a"},
		{[]string{"help", "a"}, ExitOK, "usage: kvcm-gc a [flags]"},
		{[]string{"help", "a", "x"}, ExitOK, "usage: kvcm-gc a [flags]"},
		{[]string{"b"}, ExitUsage, `unknown command "b"`},
		{[]string{"a"}, ExitOK, ""},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out bytes.Buffer
			require.Equal(t, tt.code, Main("kvcm-gc", cmds, tt.args, &out, &out))
			require.Contains(t, out.String(), tt.out)
		})
	}
}

func TestProgress(t *testing.T) {
	var out bytes.Buffer
	p := NewProgress(&out, time.Hour)
	p.Update("one")
	p.Update("two") // within the interval: not printed when not on a terminal
	p.Done("done")
	require.Equal(t, "one\ndone\n", out.String())

	require.Equal(t, "[>         ]   0%", Bar(0, 10, 10))
	require.Equal(t, "[=====>    ]  50%", Bar(5, 10, 10))
	require.Equal(t, "[==========] 100%", Bar(12, 10, 10))
	require.Equal(t, "[==========] 100%", Bar(0, 0, 10))
}
