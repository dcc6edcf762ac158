package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/cli"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
)

// seedOptions are the flags of the seed command.
type seedOptions struct {
	redis, metaURI, cluster string
	instances               int
	ids                     string
	blocks, locations       int
	garbage, tricky         float64
	root, manifest          string
	seed                    uint64
	grace                   time.Duration
	kvcmGC                  bool
	noFiles                 bool
	layout                  string
	ambiguous               bool
}

func (o *seedOptions) flags(fs *flag.FlagSet) {
	fs.StringVar(
		&o.redis,
		"redis",
		"redis://127.0.0.1:6379",
		"Redis to write the registry and the blocks into (KVCM-style URI)",
	)
	fs.StringVar(&o.metaURI, "meta-uri", "", "metadata store URI written into the instance group (default: --redis)")
	fs.StringVar(&o.cluster, "cluster", "demo", "KVCM cluster name")
	fs.IntVar(&o.instances, "instances", 3, "number of instances (inst0, inst1, …)")
	fs.StringVar(&o.ids, "instance-ids", "", "comma-separated instance ids, instead of --instances")
	fs.IntVar(&o.blocks, "blocks", 20000, "blocks per instance")
	fs.IntVar(&o.locations, "locations", 2, "locations per block (1 or 2)")
	fs.Float64Var(&o.garbage, "garbage", 0.1, "fraction of locations that are garbage (half "+
		"orphan WRITING, half storage-missing SERVING)")
	fs.Float64Var(&o.tricky, "tricky", 0.1, "fraction of locations that are live but look like garbage")
	fs.StringVar(&o.root, "root", "kvcm-gc-seed", "directory of the storages' data files (an NFS-like root)")
	fs.StringVar(&o.manifest, "manifest", "manifest.json", "file the manifest (what is garbage) is written to")
	fs.Uint64Var(&o.seed, "seed", 1, "random seed: the same seed writes the same keyspace")
	fs.DurationVar(&o.grace, "grace", 24*time.Hour, "orphan_writing_grace the collector will use (orphans are made older)")
	fs.BoolVar(&o.kvcmGC, "kvcm-gc", true, "kvcm_gc the collector will use (on: location-layout "+
		"orphans are made older than kvcm_gc_grace + kvcm_gc_margin, 30h)")
	fs.BoolVar(&o.noFiles, "no-files", false, "write metadata only, no data files")
	fs.StringVar(&o.layout, "layout", "location", "block layout: location (today's KVCM: one "+
		"L#<id> field per location) or legacy (KVCM f6aa2b2: one __uri__ map)")
	fs.BoolVar(&o.ambiguous, "ambiguous", false, "legacy layout: also upgrade a few blocks to "+
		"hold both layouts, as a KVCM upgrade leaves them (the location layout always has some)")
}

// layoutOf is --layout as a kvcm.Layout.
func (o *seedOptions) layoutOf() (kvcm.Layout, error) {
	l, ok := kvcm.ParseLayout(o.layout)
	if !ok || l != kvcm.LayoutLocation && l != kvcm.LayoutLegacy {
		return 0, fmt.Errorf("--layout %q: want location or legacy", o.layout)
	}
	return l, nil
}

// check validates the flags before anything connects.
func (o *seedOptions) check(*cli.Env) error {
	if _, err := redismeta.ParseURI(o.redis); err != nil {
		return fmt.Errorf("--redis: %w", err)
	}
	if o.locations < 1 || o.locations > 2 || o.blocks < 0 || o.garbage < 0 || o.tricky < 0 || o.garbage+o.tricky > 1 {
		return errors.New("need 1 <= --locations <= 2, --blocks >= 0, --garbage, --tricky >= 0 with a sum <= 1")
	}
	_, err := o.layoutOf()
	return err
}

func (o *seedOptions) run(ctx context.Context, e *cli.Env) error {
	conn, err := redismeta.ParseURI(o.redis)
	if err != nil {
		return cli.UsageError(fmt.Errorf("--redis: %w", err))
	}
	// The registry records the storages' root paths; KVCM's and kvcm-gc's file backends need
	// them absolute.
	layout, err := o.layoutOf()
	if err != nil {
		return cli.UsageError(err)
	}
	root, err := filepath.Abs(o.root)
	if err != nil {
		return fmt.Errorf("--root: %w", err)
	}
	rdb, err := redismeta.NewClient(conn)
	if err != nil {
		return err
	}
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("ping %s: %w", conn, err)
	}
	sp := seed.Spec{
		Cluster:           o.cluster,
		Layout:            layout,
		Ambiguous:         o.ambiguous,
		Blocks:            o.blocks,
		LocationsPerBlock: o.locations,
		GarbageFraction:   o.garbage,
		TrickyFraction:    o.tricky,
		Root:              root,
		MetaURI:           o.metaURI,
		Grace:             o.grace,
		NoKVCMGC:          !o.kvcmGC,
		Seed:              o.seed,
		NoFiles:           o.noFiles,
	}
	if sp.MetaURI == "" {
		sp.MetaURI = o.redis
	}
	if o.ids != "" {
		sp.Instances = strings.Split(o.ids, ",")
	} else {
		for i := range o.instances {
			sp.Instances = append(sp.Instances, fmt.Sprintf("inst%d", i))
		}
	}
	prog := cli.NewProgress(e.Stderr, 2*time.Second)
	sp.Progress = func(done, total int) {
		prog.Update(fmt.Sprintf("seeding %s %d/%d blocks", cli.Bar(done, total, 30), done, total))
	}
	start := time.Now()
	m, err := seed.Generate(ctx, rdb, sp)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %w", cli.ErrInterrupted, err)
		}
		return err
	}
	prog.Done(fmt.Sprintf("seeded %d blocks in %s", m.Blocks, time.Since(start).Round(time.Millisecond)))
	if err := m.WriteFile(o.manifest); err != nil {
		return err
	}
	fmt.Fprintf(e.Stdout, "cluster %s on %s, %s layout: %d instances, %d blocks, %d locations, %d garbage\n",
		m.Cluster, conn, m.Layout, len(m.Instances), m.Blocks, len(m.Locations), len(m.Garbage()))
	for _, l := range m.LayoutLines() {
		fmt.Fprintf(e.Stdout, "  %s\n", l)
	}
	fmt.Fprintln(e.Stdout, "locations by kind (corrupt_uri: keys whose __uri__ or an L# value is not JSON):")
	for _, kind := range slices.Sorted(maps.Keys(m.Counts)) {
		fmt.Fprintf(e.Stdout, "  %-18s %d\n", kind, m.Counts[kind])
	}
	fmt.Fprintf(e.Stdout, "manifest written to %s\n", o.manifest)
	return nil
}

func seedCommand() *cli.Command {
	o := &seedOptions{}
	return &cli.Command{
		Name:    "seed",
		Summary: "write a synthetic KVCM deployment (registry, blocks, files) with known garbage, and its manifest",
		Flags:   o.flags,
		Check:   o.check,
		Run:     o.run,
	}
}
