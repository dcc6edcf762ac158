package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/cli"
	"github.com/kvcm-gc/kvcm-gc/config"
	"github.com/kvcm-gc/kvcm-gc/internal/version"
	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// kvcmgc runs the kvcm-gc command line with args in an environment free of KVCMGC_ variables.
func kvcmgc(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	for _, k := range config.Keys() {
		t.Setenv(k.Env, "")
	}
	t.Setenv(config.FileEnv, "")
	var out, errOut bytes.Buffer
	code := cli.Main("kvcm-gc", commands(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestCommandTable(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range commands() {
		require.False(t, seen[c.Name], "command %s twice", c.Name)
		seen[c.Name] = true
		require.NotEmpty(t, c.Summary, c.Name)
		require.True(t, c.Run != nil || len(c.Sub) > 0, c.Name)
	}
	require.True(t, app.All.Walker && app.All.Sweeper, "kvcm-gc run runs the sweep's stages")
	for _, want := range []string{"scanner", "prober", "deleter", "walker", "sweeper", "run", "status", "replay", "dlq", "pause", "resume", "ensure", "report", "seed", "demo", "version"} {
		require.True(t, seen[want], want)
	}
}

// TestVersion: version and --version print the same four lines and exit 0.
func TestVersion(t *testing.T) {
	v := version.Get()
	want := fmt.Sprintf("kvcm-gc %s\nrevision:   %s\nbuild time: %s\ngo version: %s\n", v.Version, v.Revision, v.BuildTime, v.GoVersion)
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		code, out, stderr := kvcmgc(t, args...)
		require.Equal(t, cli.ExitOK, code, "%v: %s", args, stderr)
		require.Equal(t, want, out, args)
	}
}

// TestEveryHelpListsItsFlags: every command's and subcommand's --help (and help <command>)
// exits 0 and prints the usage first, then each of the command's own flags, then the
// configuration keys for a command that reads them.
func TestEveryHelpListsItsFlags(t *testing.T) {
	type entry struct {
		words []string
		cmd   *cli.Command
	}
	var all []entry
	for _, c := range commands() {
		if len(c.Sub) == 0 {
			all = append(all, entry{[]string{c.Name}, c})
		}
		for _, s := range c.Sub {
			all = append(all, entry{[]string{c.Name, s.Name}, s})
		}
	}
	for _, e := range all {
		name := strings.Join(e.words, " ")
		t.Run(name, func(t *testing.T) {
			for _, args := range [][]string{append(append([]string{}, e.words...), "--help"), append([]string{"help"}, e.words...)} {
				code, out, stderr := kvcmgc(t, args...)
				require.Equal(t, cli.ExitOK, code, stderr)
				require.True(t, strings.HasPrefix(out, "usage: kvcm-gc "+name+" "), "%q starts with its usage:\n%s", args, out)
				if e.cmd.Flags != nil {
					fs := flag.NewFlagSet(name, flag.ContinueOnError)
					e.cmd.Flags(fs)
					fs.VisitAll(func(f *flag.Flag) {
						require.Contains(t, out, "  -"+f.Name, "%s lists -%s", name, f.Name)
					})
				}
				if e.cmd.Config {
					require.Contains(t, out, "--nats.url", "the configuration keys are documented too")
				}
			}
		})
	}
}

// unreachable points a command at a NATS server that never answers, with a long connect
// timeout: a command that connected before checking its arguments would wait out the minute.
var unreachable = []string{"--cluster", "c1", "--nats.url", "nats://127.0.0.1:1", "--nats.connect_timeout", "1m"}

// TestUsageErrorsBeforeConnecting: every operator command refuses bad arguments at once with
// exit status 2 and a message naming what is wrong, without connecting.
func TestUsageErrorsBeforeConnecting(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "extra"}, `unexpected arguments ["extra"]`},
		{[]string{"status", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"pause", "deleter", "--for", "-5m"}, "pause: --for -5m0s: the pause must last a positive time"},
		{[]string{"pause", "deleter", "--for", "0s"}, "pause: --for 0s: the pause must last a positive time"},
		{[]string{"pause", "deleter", "--for", "2h", "--until", "2099-01-01T00:00:00Z"}, "give --for or --until, not both"},
		{[]string{"pause", "deleter", "--until", "2001-01-01T00:00:00Z"}, "the time is not in the future"},
		{[]string{"pause", "deleter", "--until", "tomorrow"}, `--until "tomorrow": not an RFC 3339 time`},
		{[]string{"pause", "--for", "2h"}, "pause takes one stage (scanner, prober, deleter, walker, sweeper, all), got 0 arguments"},
		{[]string{"pause", "janitor", "--for", "2h"}, `pause: unknown stage "janitor"`},
		{[]string{"resume"}, "resume takes one stage"},
		{[]string{"resume", "janitor"}, `resume: unknown stage "janitor"`},
		{[]string{"dlq"}, "the subcommand (list, retry) comes first"},
		{[]string{"dlq", "purge"}, `unknown subcommand "purge" (list, retry)`},
		{[]string{"dlq", "retry", "--stream", "DELETES"}, "dlq retry: needs --stream and --seq"},
		{[]string{"dlq", "list", "--since", "-1h"}, "--since -1h0m0s: must not be negative"},
		{[]string{"replay", "--stage", "scanner"}, "scanner"},
		{[]string{"replay", "--stage", "prober", "--key", "x"}, `--key "x": not a signed 64-bit decimal`},
		{[]string{"replay", "prober", "deleter"}, "unexpected arguments"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			start := time.Now()
			code, _, stderr := kvcmgc(t, append(tc.args, unreachable...)...)
			require.Equal(t, cli.ExitUsage, code, stderr)
			require.Contains(t, stderr, tc.want)
			require.NotContains(t, stderr, "connect to nats")
			require.Less(t, time.Since(start), 10*time.Second, "refused before connecting")
		})
	}
	code, _, stderr := kvcmgc(t, "dlq")
	require.Equal(t, cli.ExitUsage, code, stderr)
	require.Contains(t, stderr, "Subcommands:\n  list")

	// Without a cluster there are no names: a usage error too, before connecting.
	code, _, stderr = kvcmgc(t, "status", "--nats.url", "nats://127.0.0.1:1", "--nats.connect_timeout", "1m")
	require.Equal(t, cli.ExitUsage, code, stderr)
	require.Contains(t, stderr, "cluster: required")
}

// TestOperatorCommandsReachTheEmbeddedServer: with the all-in-one process's configuration
// (nats.url empty, nats.embedded.listen set), the operator's commands connect where its
// embedded server listens, and log no info lines of their own.
func TestOperatorCommandsReachTheEmbeddedServer(t *testing.T) {
	srv := testenv.StartNATS(t)
	names, err := subjects.NewNames("kvcmgc", "c1")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, subjects.Ensure(ctx, srv.JetStream(t), names, subjects.DefaultSettings()))

	file := filepath.Join(t.TempDir(), "kvcm-gc.yaml")
	listen := strings.TrimPrefix(srv.URL(), "nats://")
	require.NoError(t, os.WriteFile(file, fmt.Appendf(nil, "cluster: c1\nnats:\n  embedded:\n    listen: %s\n", listen), 0o600))

	code, out, stderr := kvcmgc(t, "status", "--config", file)
	require.Equal(t, cli.ExitOK, code, stderr)
	require.Contains(t, out, names.BatchesStream())
	require.NotContains(t, stderr, "nats connected", "an operator's command logs no info lines")

	code, out, stderr = kvcmgc(t, "pause", "deleter", "--for", "1h", "--config", file)
	require.Equal(t, cli.ExitOK, code, stderr)
	require.Contains(t, out, "deleter paused until")
	code, out, stderr = kvcmgc(t, "resume", "deleter", "--config", file)
	require.Equal(t, cli.ExitOK, code, stderr)
	require.Equal(t, "deleter resumed\n", out)

	// As the runbook writes it, at night: no --for, and the pause lasts until resume.
	code, out, stderr = kvcmgc(t, "pause", "deleter", "--config", file)
	require.Equal(t, cli.ExitOK, code, stderr)
	require.Equal(t, "deleter paused until resumed\n", out)
	code, out, stderr = kvcmgc(t, "pause", "scanner", "--config", file)
	require.Equal(t, cli.ExitOK, code, stderr)
	require.Equal(t, "scanner paused until resumed\n", out)
	js := srv.JetStream(t)
	c, err := js.Consumer(ctx, names.DeletesStream(), names.DeleterConsumer())
	require.NoError(t, err)
	require.True(t, c.CachedInfo().Paused)
	require.Greater(t, time.Until(*c.CachedInfo().Config.PauseUntil), 50*365*24*time.Hour, "no end in sight")
	code, out, stderr = kvcmgc(t, "status", "--config", file)
	require.Equal(t, cli.ExitOK, code, stderr)
	require.Regexp(t, `(?m)^deleter\s.*until resumed`, out)
	require.Regexp(t, `(?m)^scanner\s.*until resumed`, out)
	code, out, stderr = kvcmgc(t, "resume", "all", "--config", file)
	require.Equal(t, cli.ExitOK, code, stderr)
	require.Contains(t, out, "deleter resumed\n")
	c, err = js.Consumer(ctx, names.DeletesStream(), names.DeleterConsumer())
	require.NoError(t, err)
	require.False(t, c.CachedInfo().Paused)
	code, out, stderr = kvcmgc(t, "dlq", "list", "--json", "--config", file)
	require.Equal(t, cli.ExitOK, code, stderr)
	require.Equal(t, "[]\n", out)

	// A run process on port 0 cannot be found that way: the error says why.
	code, _, stderr = kvcmgc(t, "status", "--cluster", "c1", "--nats.embedded.listen", "127.0.0.1:0")
	require.Equal(t, cli.ExitUsage, code)
	require.Contains(t, stderr, "nats.url: required (nats.embedded.listen \"127.0.0.1:0\"")
}

// TestStatusAPITimeout: against a JetStream API that does not answer (as a stream does while
// its leader is elected), status takes about one jetstream.api_timeout, not the client's 5 s
// per request, shows every row with what went wrong, and exits 1: it could not read them.
func TestStatusAPITimeout(t *testing.T) {
	// A server without JetStream, where this subscriber takes the API requests and never
	// answers them.
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true})
	require.NoError(t, err)
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	require.True(t, srv.ReadyForConnections(10*time.Second))
	silent, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(silent.Close)
	_, err = silent.Subscribe("$JS.API.>", func(*nats.Msg) {})
	require.NoError(t, err)
	require.NoError(t, silent.Flush())

	start := time.Now()
	code, out, stderr := kvcmgc(t, "status", "--json", "--cluster", "c1", "--nats.url", srv.ClientURL(), "--jetstream.api_timeout", "300ms")
	require.Equal(t, cli.ExitFailure, code, stderr)
	require.Less(t, time.Since(start), 4*time.Second, "one call timeout, the reads in parallel")
	var rep ops.StatusReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Len(t, rep.Streams, 3, "no row is dropped")
	require.Len(t, rep.Consumers, 2)
	for _, s := range rep.Streams {
		require.Contains(t, s.Error, "deadline exceeded", s.Name)
	}
	for _, c := range rep.Consumers {
		require.Contains(t, c.Error, "deadline exceeded", c.Stage)
	}
}

// TestEnsureCommand runs ensure as an operator would, against a real server: a fresh topology
// is created (exit 0), an identical one is confirmed (exit 0), and one whose EVENTS stream
// keeps events for another time is named field by field and left as it is (exit 1).
func TestEnsureCommand(t *testing.T) {
	srv := testenv.StartNATS(t)
	names, err := subjects.NewNames("kvcmgc", "c1")
	require.NoError(t, err)
	args := []string{"ensure", "--cluster", "c1", "--nats.url", srv.URL()}
	top := names.Topology(subjects.DefaultSettings())
	objects := len(top.Streams) + len(top.Consumers) + len(top.Buckets)

	code, out, stderr := kvcmgc(t, args...)
	require.Equal(t, cli.ExitOK, code, stderr)
	require.Regexp(t, `stream\s+`+names.EventsStream()+`\s+created`, out)
	require.Contains(t, out, fmt.Sprintf("%d created, 0 updated, 0 identical: the topology is as configured", objects))

	code, out, stderr = kvcmgc(t, append(args, "--json")...)
	require.Equal(t, cli.ExitOK, code, stderr)
	var r ops.EnsureResult
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Len(t, r.Objects, objects)
	for _, o := range r.Objects {
		require.Equal(t, subjects.StateIdentical, o.State, o.Name)
	}

	js := srv.JetStream(t)
	ctx := context.Background()
	before, err := js.Stream(ctx, names.EventsStream())
	require.NoError(t, err)
	code, out, stderr = kvcmgc(t, append(args, "--jetstream.events_max_age", "1h")...)
	require.Equal(t, cli.ExitFailure, code, "out:\n%s\nstderr:\n%s", out, stderr)
	require.Regexp(t, `stream\s+`+names.EventsStream()+`\s+differs`, out)
	require.Regexp(t, `stream `+names.EventsStream()+`\s+max_age\s+168h0m0s\s+1h0m0s\s+yes`, out)
	require.Contains(t, out, "1 object differs from the configuration; nothing of it was changed")
	require.Contains(t, out, "run ensure --update")
	require.Empty(t, stderr, "the table says it all")
	after, err := js.Stream(ctx, names.EventsStream())
	require.NoError(t, err)
	require.Equal(t, before.CachedInfo().Config, after.CachedInfo().Config, "left as it is")
	t.Log("\n" + out)

	// What an upgrade tuning the deployment runs (the chart's hook, admin.ensure.update): the
	// streams' max_bytes and the deleter's in-flight cap are updated in place.
	tuned := append(args, "--update", "--jetstream.max_bytes", "2147483648", "--max_inflight_delete_requests", "8")
	code, out, stderr = kvcmgc(t, tuned...)
	require.Equal(t, cli.ExitOK, code, "out:\n%s\nstderr:\n%s", out, stderr)
	require.Regexp(t, `consumer\s+`+names.DeletesStream()+`/deleter\s+updated`, out)
	require.Regexp(t, `consumer `+names.DeletesStream()+`/deleter\s+max_ack_pending\s+2\s+8`, out)
	require.Regexp(t, `stream `+names.BatchesStream()+`\s+max_bytes\s+1073741824\s+2147483648`, out)
	require.Contains(t, out, fmt.Sprintf("0 created, 5 updated, %d identical: the topology is as configured", objects-5))
	t.Log("\n" + out)
	c, err := js.Consumer(ctx, names.DeletesStream(), names.DeleterConsumer())
	require.NoError(t, err)
	require.Equal(t, 8, c.CachedInfo().Config.MaxAckPending)
	code, out, stderr = kvcmgc(t, tuned...)
	require.Equal(t, cli.ExitOK, code, stderr)
	require.Contains(t, out, fmt.Sprintf("0 created, 0 updated, %d identical", objects))

	// A field the server cannot update: nothing is updated, the field is named, exit 1.
	require.NoError(t, js.DeleteStream(ctx, names.SweepStream()))
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: names.SweepStream(), Subjects: []string{names.SweepFilter()},
		Storage: jetstream.MemoryStorage, MaxBytes: 2147483648, MaxAge: 72 * time.Hour, MaxMsgs: -1, Duplicates: 2 * time.Minute,
		AllowDirect: true, Description: top.Streams[3].Description})
	require.NoError(t, err)
	code, out, stderr = kvcmgc(t, append(args, "--update", "--jetstream.max_bytes", "2147483648", "--max_inflight_delete_requests", "4")...)
	require.Equal(t, cli.ExitFailure, code, "out:\n%s\nstderr:\n%s", out, stderr)
	require.Regexp(t, `stream `+names.SweepStream()+`\s+storage\s+Memory\s+File\s+no: delete and create it again`, out)
	require.Regexp(t, `consumer `+names.DeletesStream()+`/deleter\s+max_ack_pending\s+8\s+4\s+yes`, out)
	require.Contains(t, out, "2 objects differ from the configuration, in 1 field the server cannot update in place")
	c, err = js.Consumer(ctx, names.DeletesStream(), names.DeleterConsumer())
	require.NoError(t, err)
	require.Equal(t, 8, c.CachedInfo().Config.MaxAckPending, "not updated: all or nothing")
	t.Log("\n" + out)
}
