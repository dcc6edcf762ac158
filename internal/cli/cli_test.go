package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/config"
)

func TestSplit(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	config.AddFlags(fs)
	tests := []struct {
		name       string
		args       []string
		mine, rest []string
	}{
		{"nothing", nil, nil, nil},
		{"command flags pass", []string{"--json", "deleter", "--for", "2h"}, nil, []string{"--json", "deleter", "--for", "2h"}},
		{"config flags anywhere", []string{"deleter", "--config", "c.yaml", "--for", "2h", "--nats.url=nats://n:1"},
			[]string{"--config", "c.yaml", "--nats.url=nats://n:1"}, []string{"deleter", "--for", "2h"}},
		{"single dash", []string{"-cluster", "c1", "x"}, []string{"-cluster", "c1"}, []string{"x"}},
		{"bool key takes no value", []string{"--dry_run", "x"}, []string{"--dry_run"}, []string{"x"}},
		{"double dash ends", []string{"--cluster", "a", "--", "--cluster", "b"}, []string{"--cluster", "a"}, []string{"--cluster", "b"}},
		{"help goes to the command", []string{"--help"}, nil, []string{"--help"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mine, rest, err := split(fs, tt.args)
			require.NoError(t, err)
			require.Equal(t, tt.mine, mine)
			require.Equal(t, tt.rest, rest)
		})
	}
	_, _, err := split(fs, []string{"x", "--cluster"})
	require.ErrorContains(t, err, "needs an argument")
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
	require.Equal(t, 3*time.Second, seen.Config.ScanInterval)
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
}

func TestArgsCommand(t *testing.T) {
	var got *Env
	c := &Command{Name: "pause", Config: true, Args: true, Run: func(_ context.Context, e *Env) error {
		got = e
		for _, a := range e.Args {
			if a == "--help" {
				return flag.ErrHelp
			}
		}
		return nil
	}}
	code, _, stderr := run(t, c, "deleter", "--cluster", "c1", "--for", "2h")
	require.Equal(t, ExitOK, code, stderr)
	require.Equal(t, []string{"deleter", "--for", "2h"}, got.Args)
	require.Equal(t, "c1", got.Config.Cluster)

	// --help reaches the command even with a configuration that would not load.
	code, out, _ := run(t, c, "--help", "--config", "/nonexistent.yaml")
	require.Equal(t, ExitOK, code)
	require.Contains(t, out, "orphan_writing_grace", "the configuration keys follow the command's own usage")
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
