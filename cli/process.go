package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/config"
	"github.com/kvcm-gc/kvcm-gc/internal/httpserver"
	"github.com/kvcm-gc/kvcm-gc/internal/natsperm"
	"github.com/kvcm-gc/kvcm-gc/internal/version"
	"github.com/kvcm-gc/kvcm-gc/jsmetrics"
	"github.com/kvcm-gc/kvcm-gc/natsembed"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
)

// shutdownTimeout bounds the HTTP server's and the embedded NATS server's shutdown.
const shutdownTimeout = 5 * time.Second

// Process runs stages as one kvcm-gc process: the HTTP endpoint, optionally an embedded NATS
// JetStream server, the NATS connection, and app.Run until the context ends.
type Process struct {
	Stages app.Stages
	// Embedded starts a NATS JetStream server in the process when nats.url is empty (the run
	// command), with its file store in nats.embedded.store_dir.
	Embedded bool
	// Registry receives the process's metrics; nil makes a new one. Nothing is ever
	// registered on the global registry.
	Registry *prometheus.Registry
	// Started, when set, is called once the stages are about to start, with the NATS URL the
	// process uses and its metrics (the demo watches progress through them).
	Started func(natsURL string, m *app.Metrics)
	// HTTPStarted, when set, is called with the HTTP endpoint's address.
	HTTPStarted func(addr net.Addr)
}

// StageCommand is the command of a process running the given stages.
func StageCommand(name, summary string, which app.Stages) *Command {
	return &Command{Name: name, Summary: summary, Config: true,
		Run: func(ctx context.Context, e *Env) error { return (&Process{Stages: which}).Run(ctx, e) }}
}

// StageMain is the whole main of a binary running the given stages: it runs StageCommand with
// the process's arguments and exits with its status; --version prints the version.
func StageMain(name, summary string, which app.Stages) {
	prog := filepath.Base(os.Args[0])
	if len(os.Args) == 2 && (os.Args[1] == "--version" || os.Args[1] == "-version") {
		version.Get().Write(os.Stdout, prog)
		os.Exit(ExitOK)
	}
	os.Exit(RunCommand(prog, StageCommand(name, summary, which), os.Args[1:], os.Stdout, os.Stderr))
}

// AllInOneCommand is the run command: every stage in one process, with an embedded NATS
// JetStream server unless nats.url names one.
func AllInOneCommand() *Command {
	return &Command{
		Name: "run",
		Summary: "run every stage in one process, with an embedded NATS JetStream server " +
			"(file store in nats.embedded.store_dir) unless nats.url names one",
		Config: true,
		Run: func(ctx context.Context, e *Env) error {
			return (&Process{Stages: app.All, Embedded: true}).Run(ctx, e)
		},
	}
}

// Run runs the process until ctx is done, then shuts it down gracefully: the stages stop
// fetching, in-flight messages finish or go back to the server, the scanner releases its
// lease, the NATS connection flushes, the HTTP endpoint and the embedded server stop.
func (p *Process) Run(ctx context.Context, e *Env) error {
	cfg := e.Config
	log := e.Logger
	// First, so that whatever fails next is logged under a known build.
	log.Info("kvcm-gc", "version", version.Get(), "stages", stageList(p.Stages))
	// The Redis client logs connection-pool failures on its own; they belong in the process's
	// structured log, not as bare lines on stderr.
	redis.SetLogger(redisLog{log})
	if cfg.Enabled {
		needsRegistry := p.Stages.Scanner || p.Stages.Prober || p.Stages.Walker || p.Stages.Sweeper
		if err := cfg.Require(config.Needs{Registry: needsRegistry, NATS: !p.Embedded}); err != nil {
			return UsageError(fmt.Errorf("configuration: %w", err))
		}
	}
	reg := p.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	// Beside the default figures, go_gc_heap_live_bytes: the heap the last collection found
	// live, the one figure of the heap that what was allocated since does not blur.
	reg.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
		collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		version.NewCollector())
	metrics := app.NewMetrics(reg)
	health := &app.Health{}
	ready := health.Ready
	if !cfg.Enabled {
		ready = func(context.Context) (string, error) { return "disabled: enabled is false\n", nil }
	}
	if cfg.HTTP.Listen != "" {
		srv, err := httpserver.Start(cfg.HTTP.Listen, reg, ready, log)
		if err != nil {
			return fmt.Errorf("http.listen: %w", err)
		}
		defer shutdown(log, "http server", srv.Shutdown)
		if p.HTTPStarted != nil {
			p.HTTPStarted(srv.Addr())
		}
	}
	if !cfg.Enabled {
		// Kept up so the deployment stays observable and can be enabled without a new rollout
		// of anything but the configuration.
		log.Info("disabled; serving health and metrics only")
		<-ctx.Done()
		return nil
	}

	url := cfg.NATS.URL
	if p.Embedded && url == "" {
		srv, err := startEmbedded(cfg.NATS.Embedded, log)
		if err != nil {
			return err
		}
		defer func() {
			srv.Shutdown()
			srv.WaitForShutdown()
			log.Info("embedded nats server stopped")
		}()
		url = srv.ClientURL()
	}
	natsCfg := cfg.NATS
	if stages := stageList(p.Stages); len(stages) == 1 && cfg.Cluster != "" {
		// A stage's replies arrive under its own inbox, the only one its user may read.
		if names, err := cfg.Names(); err == nil {
			natsCfg = WithInbox(natsCfg, names, stages[0])
		}
	}
	nc, err := ConnectNATS(ctx, natsCfg, url, "kvcm-gc-"+e.Name, log)
	if err != nil {
		return err
	}
	defer func() {
		// Events published asynchronously during shutdown reach the server before the close.
		if err := nc.FlushTimeout(shutdownTimeout); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			log.Warn("flush nats connection", "err", err)
		}
		nc.Close()
	}()
	// A subject the stage's NATS user may not use is a fault of the deployment that waiting
	// does not cure: the stages stop at the server's first refusal, draining what they hold,
	// and the process exits naming the subject and the identity, rather than run on with a
	// request that times out over and over (docs/security.md).
	ctx, unguard := natsperm.Watch(nc, Identity(cfg.NATS)).Guard(ctx, ">")
	defer unguard()

	opts, err := app.OptionsOf(cfg)
	if err != nil {
		return UsageError(fmt.Errorf("configuration: %w", err))
	}
	opts.Logger, opts.Metrics, opts.Reg, opts.Health = log, metrics, reg, health
	names, err := cfg.Names()
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(cmp.Or(cfg.JS.APITimeout, app.DefaultAPITimeout)))
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	if err := jsmetrics.Register(reg, js, names, stageList(p.Stages),
		jsmetrics.WithLogger(log), jsmetrics.WithTimeout(cfg.JS.APITimeout)); err != nil {
		return fmt.Errorf("register jetstream metrics: %w", err)
	}
	if p.Started != nil {
		p.Started(url, metrics)
	}
	log.Info("starting", "stages", stageList(p.Stages), "config", cfg)
	app.TuneGC()
	err = app.Run(ctx, nc, opts, p.Stages)
	if v := natsperm.Refused(ctx); v != nil {
		return fmt.Errorf("stop the stages: %w", v)
	}
	if err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}

func startEmbedded(c config.EmbeddedJS, log *slog.Logger) (*server.Server, error) {
	host, portText, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return nil, fmt.Errorf("nats.embedded.listen: %w", err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return nil, fmt.Errorf("nats.embedded.listen: %w", err)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	srv, err := natsembed.Start(natsembed.Config{StoreDir: c.StoreDir, Host: host, Port: port,
		ServerName: "kvcm-gc-embedded", Logger: slog.New(quiet{log.Handler()}).With("component", "nats-server")})
	if err != nil {
		return nil, fmt.Errorf("nats.embedded: %w", err)
	}
	log.Info("embedded nats server started", "url", srv.ClientURL(), "store_dir", c.StoreDir)
	return srv, nil
}

func shutdown(log *slog.Logger, what string, f func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := f(ctx); err != nil {
		log.Warn("shut down", "what", what, "err", err)
	}
}

func stageList(s app.Stages) []string {
	var out []string
	for _, st := range []struct {
		on   bool
		name string
	}{{s.Scanner, pipeline.StageScanner}, {s.Prober, pipeline.StageProber}, {s.Deleter, pipeline.StageDeleter},
		{s.Walker, pipeline.StageWalker}, {s.Sweeper, pipeline.StageSweeper}} {
		if st.on {
			out = append(out, st.name)
		}
	}
	return out
}

// quiet passes on the embedded server's warnings and errors only, unless the process logs at
// debug level: its notices (banner, limits, store paths) would bury kvcm-gc's own lines.
type quiet struct{ slog.Handler }

func (q quiet) Enabled(ctx context.Context, l slog.Level) bool {
	return (l >= slog.LevelWarn || q.Handler.Enabled(ctx, slog.LevelDebug)) && q.Handler.Enabled(ctx, l)
}

func (q quiet) WithAttrs(a []slog.Attr) slog.Handler { return quiet{q.Handler.WithAttrs(a)} }
func (q quiet) WithGroup(n string) slog.Handler      { return quiet{q.Handler.WithGroup(n)} }

// redisLog adapts the process logger to the Redis client's logger interface.
type redisLog struct{ log *slog.Logger }

func (r redisLog) Printf(ctx context.Context, format string, v ...any) {
	r.log.WarnContext(ctx, "redis client", "line", fmt.Sprintf(format, v...))
}
