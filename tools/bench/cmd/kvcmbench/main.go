// Command kvcmbench measures kvcm-gc against the raw limits of the machine: see package
// bench. "kvcmbench nats -store DIR" is the NATS server process it starts for itself.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/kvcm-gc/kvcm-gc/tools/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var err error
	if len(os.Args) > 1 && os.Args[1] == "nats" {
		err = serveNATS(ctx, os.Args[2:])
	} else {
		err = run(ctx, log, os.Args[1:])
	}
	if err != nil {
		log.Error("kvcmbench", "err", err)
		os.Exit(1)
	}
}

func serveNATS(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("nats", flag.ExitOnError)
	store := fs.String("store", "", "JetStream store directory")
	_ = fs.Parse(args)
	return bench.ServeNATS(ctx, *store, os.Stdout)
}

func run(ctx context.Context, log *slog.Logger, args []string) error {
	fs := flag.NewFlagSet("kvcmbench", flag.ExitOnError)
	cfg := bench.Config{Unpaced: bench.UnpacedProfile(), Logger: log}
	fs.IntVar(&cfg.Blocks, "blocks", 1_000_000, "blocks of the main keyspace")
	fs.IntVar(&cfg.SmallBlocks, "small-blocks", 100_000, "blocks of the second keyspace (peak memory at two sizes)")
	fs.IntVar(&cfg.Instances, "instances", 4, "KVCM instances the blocks are spread over")
	fs.IntVar(&cfg.Locations, "locations", 2, "locations per block")
	fs.Float64Var(&cfg.Garbage, "garbage", 0.1, "fraction of garbage locations")
	fs.Float64Var(&cfg.Tricky, "tricky", 0, "fraction of live locations that look like garbage")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "keyspace seed")
	fs.StringVar(&cfg.DataDir, "data-dir", os.TempDir(), "directory for the run's data files, JetStream store and logs")
	fs.StringVar(&cfg.StageBin, "stage-bin", "", "the kvcmstage binary (default: next to this one)")
	fs.StringVar(&cfg.Out, "out", "", "Markdown file receiving the report (default: standard output only)")
	section := fs.String("section", "full", "name of the report's section in -out (replaced on every run)")
	fs.StringVar(&cfg.Command, "command", "", "command line recorded in the report (default: this one)")
	fs.StringVar(&cfg.CPUProfile, "cpuprofile", "", "directory receiving CPU profiles of every stage process and of the harness")
	fs.IntVar(&cfg.ServingRate, "serving-rate", 2000, "read load during the serving windows, requests per second")
	fs.DurationVar(&cfg.ServingWindow, "serving-window", 3*time.Second, "length of each serving window")
	fs.IntVar(&cfg.ServingReps, "serving-reps", 6, "repetitions of the off/default/unpaced windows (in each placement)")
	pins := fs.String("serving-pin", bench.PinPinned+","+bench.PinShared, "placements of the serving windows, alternated: \"pinned\" (Redis and the load on one core, kvcm-gc and NATS on the other, with taskset), \"shared\" (every process on every core)")
	layout := fs.String("layout", "both", "block layout of the keyspaces: location (today's KVCM), legacy (KVCM f6aa2b2) or both, one after the other, each against its own raw baselines")
	smallLayout := fs.String("small-layout", "location", "layouts of the small phase (peak memory at two sizes): location, legacy, both or none")
	fs.BoolVar(&cfg.RawMatch, "raw-match", false, "also time the raw per-instance MATCH walk (the former scanner's) on the legacy keyspace")
	fs.IntVar(&cfg.Unpaced.ScanBatchSize, "batch", cfg.Unpaced.ScanBatchSize, "scan_batch_size of the unpaced runs")
	fs.IntVar(&cfg.Unpaced.DeleterMaxAckPending, "deleter-inflight", cfg.Unpaced.DeleterMaxAckPending, "max_inflight_delete_requests of the unpaced runs")
	fs.IntVar(&cfg.Unpaced.DeleterWorkers, "deleter-workers", cfg.Unpaced.DeleterWorkers, "deleter workers of the unpaced runs")
	fs.IntVar(&cfg.Unpaced.ProberWorkers, "prober-workers", cfg.Unpaced.ProberWorkers, "prober workers of the unpaced runs")
	phases := fs.String("phases", strings.Join(bench.AllPhases, ","), "phases to run (and \"ab\": each stage alone with -stage-bin and -ab-stage-bin, alternated; \"stores\": a scanner round over two stores with one replica, then two)")
	fs.StringVar(&cfg.ABStageBin, "ab-stage-bin", "", "a second kvcmstage binary for the ab phase (a build with a change to measure)")
	fs.IntVar(&cfg.ABReps, "ab-reps", 2, "alternations of the ab phase")
	fs.IntVar(&cfg.StoresReps, "stores-reps", 3, "alternations of one replica and two in the stores phase")
	paceRates := fs.String("pace-rates", "2000,8000,16000,32000,64000,0", "max_keys_per_second of the pace phase's curve, 0 for unpaced")
	paceSmall := fs.String("pace-small-batch-rates", "8000,32000", "rates of the pace phase's curve also run with -pace-small-batch keys per page")
	fs.IntVar(&cfg.PaceSmallBatch, "pace-small-batch", 32, "scan_batch_size of -pace-small-batch-rates (shorter bursts)")
	fs.IntVar(&cfg.PaceReps, "pace-reps", 2, "repetitions of the pace phase's curve (each point after a kvcm-gc-off window)")
	paceDuties := fs.String("pace-duties", "0.05,0.1,0.2", "scanner.duty points of the pace phase's curve")
	fs.IntVar(&cfg.ScaleBlocks, "scale-blocks", 10_000_000, "blocks of the scale phase's larger metadata-only keyspace (the smaller: a tenth)")
	fs.IntVar(&cfg.PaceStepRate, "pace-step-rate", 0, "read load after the pace phase's load step, requests per second (default: twice -serving-rate)")
	costPoints := fs.String("cost-points", "", "configurations of the cost phase: walk:COUNT (pages of one pipeline), walk:COUNT/DEPTH, scan:COUNT, read:DEPTH, comma-separated (default: pages of 16 to 1,024 keys, COUNT 256 and 1,024 in pipelines of 64, SCAN and HGETALL alone)")
	fs.IntVar(&cfg.CostKeys, "cost-keys", 200_000, "keys each measurement of the cost phase walks (the first of the SCAN order)")
	fs.IntVar(&cfg.CostReps, "cost-reps", 2, "repetitions of the cost phase's measurements, in alternating order")
	fs.IntVar(&cfg.CostGrow, "cost-grow", 0, "after the cost phase, seed the main keyspace again on a second redis-server, grow it this many times (at most 16), and measure both alternately")
	duties := fs.String("duties", "0.05,0.1,0.2", "duties of the raw duty walk (phase duty)")
	dutyDepths := fs.String("duty-depths", "64", "keys per pipeline of the raw duty walk")
	deleterDuties := fs.String("deleter-duties", "0,0.1", "delete_duty values of the deleter-duty phase (0: off)")
	fs.IntVar(&cfg.DeleterDutyReps, "deleter-duty-reps", 1, "repetitions of the deleter-duty phase's runs, alternated")
	fs.DurationVar(&cfg.DutyWindow, "duty-window", 5*time.Second, "length of each window of the raw duty walk")
	fs.IntVar(&cfg.DutyReps, "duty-reps", 1, "repetitions of the raw duty walk's windows")
	fs.DurationVar(&cfg.IdleWindow, "idle-window", 10*time.Second, "after the end-to-end run, how long to measure the stages idle between rounds (0: not measured)")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the working directory (data, logs)")
	_ = fs.Parse(args)

	if *phases != "" {
		cfg.Phases = strings.Split(*phases, ",")
	}
	var err error
	if cfg.PaceRates, err = bench.ParseRates(*paceRates); err != nil {
		return fmt.Errorf("-pace-rates: %w", err)
	}
	if cfg.PaceSmallBatchRates, err = bench.ParseRates(*paceSmall); err != nil {
		return fmt.Errorf("-pace-small-batch-rates: %w", err)
	}
	if cfg.PaceDuties, err = bench.ParseRates(*paceDuties); err != nil {
		return fmt.Errorf("-pace-duties: %w", err)
	}
	if cfg.Duties, err = bench.ParseRates(*duties); err != nil {
		return fmt.Errorf("-duties: %w", err)
	}
	if cfg.DeleterDuties, err = bench.ParseRates(*deleterDuties); err != nil {
		return fmt.Errorf("-deleter-duties: %w", err)
	}
	depths, err := bench.ParseRates(*dutyDepths)
	if err != nil {
		return fmt.Errorf("-duty-depths: %w", err)
	}
	for _, d := range depths {
		cfg.DutyDepths = append(cfg.DutyDepths, int(d))
	}
	if cfg.CostPoints, err = bench.ParseCostPoints(*costPoints); err != nil {
		return fmt.Errorf("-cost-points: %w", err)
	}
	if cfg.PaceStepRate <= 0 {
		cfg.PaceStepRate = 2 * cfg.ServingRate
	}
	if cfg.Layouts, err = bench.ParseLayouts(*layout); err != nil || len(cfg.Layouts) == 0 {
		return fmt.Errorf("-layout: %v", orNone(err))
	}
	if cfg.SmallLayouts, err = bench.ParseLayouts(*smallLayout); err != nil {
		return fmt.Errorf("-small-layout: %w", err)
	}
	if cfg.ServingPins, err = bench.ParsePins(*pins); err != nil || len(cfg.ServingPins) == 0 {
		return fmt.Errorf("-serving-pin: %v", orNone(err))
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own binary: %w", err)
	}
	cfg.Self = self
	if cfg.StageBin == "" {
		cfg.StageBin = filepath.Join(filepath.Dir(self), "kvcmstage")
	}
	if _, err := os.Stat(cfg.StageBin); err != nil {
		return fmt.Errorf("stage binary (build tools/bench/cmd/kvcmstage, or pass -stage-bin): %w", err)
	}
	if strings.Contains(*phases, bench.PhaseAB) {
		if _, err := os.Stat(cfg.ABStageBin); err != nil {
			return fmt.Errorf("the ab phase needs -ab-stage-bin: %w", err)
		}
	}
	if cfg.Command == "" {
		cfg.Command = strings.Join(append([]string{filepath.Base(self)}, args...), " ")
	}
	cfg.Command = strings.Join(strings.Fields(cfg.Command), " ")
	if runtime.NumCPU() < 2 {
		log.Warn("fewer than 2 cores: the stage processes compete with Redis and NATS for one")
	}
	res, err := bench.Run(ctx, cfg)
	if res == nil {
		return err
	}
	report := bench.Report(res)
	fmt.Println(report)
	if cfg.Out != "" {
		if werr := bench.WriteReport(cfg.Out, *section, report); werr != nil {
			return errors.Join(err, werr)
		}
	}
	if err == nil && len(res.Errors) > 0 {
		err = bench.ErrFailed
	}
	return err
}

// orNone names an empty selection.
func orNone(err error) any {
	if err == nil {
		return "nothing selected"
	}
	return err
}
