package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/tools/bench/stage"
)

// The scale phase asks whether a stage's rate or memory depends on the size of the keyspace:
// each stage alone on a metadata-only keyspace of Config.ScaleBlocks/scaleFactor blocks, then
// on the same keyspace grown to Config.ScaleBlocks, in one run. Metadata only (no data files,
// the stat probe off): 10,000,000 blocks would need 40 million files, and the stat probe's
// rate is the file system's, measured by the other phases. The large keyspace is the small
// one's blocks and scaleFactor-1 copies of each made by Redis (COPY), so both have the same
// shape exactly, and seeding costs one seeded keyspace and a copy.

// scaleFactor is the ratio of the scale phase's two sizes.
const scaleFactor = 10

// ScaleResults are the scale phase: the same stages on the same keyspace at two sizes.
type ScaleResults struct {
	Profile      stage.Profile
	Small, Large ScaleSize
}

// ScaleSize is each stage alone on the scale keyspace at one size.
type ScaleSize struct {
	Counts KeyspaceCounts
	Alone  *AloneResults
	// RedisMemory is Redis's used_memory with the keyspace in it.
	RedisMemory int64
	// Made is how long seeding (the small size) or copying (the large one) took; Rehashed
	// how long Redis went on rehashing its keys' hash table after the copies (waited for).
	Made, Rehashed time.Duration
}

// scaleProfile is the unpaced profile with the stat probe off, its streams without a size
// cap: a round of 10,000,000 blocks stores about 2 GB, more than the default max_bytes
// (sized for a store of a million blocks), and a stream that discards its oldest batches
// before the prober reads them would lose work.
func scaleProfile(unpaced stage.Profile) stage.Profile {
	p := unpaced
	p.Name = unpaced.Name + ", stat probe off"
	p.ProbeStat = false
	p.MaxBytes = -1
	return p
}

// scale runs the scale phase in keyspaceDB (whatever keyspace was there is flushed).
func (h *Harness) scale(ctx context.Context, layout kvcm.Layout) (*ScaleResults, error) {
	cfg := h.cfg
	res := &ScaleResults{Profile: scaleProfile(cfg.Unpaced)}
	small := max(cfg.ScaleBlocks/scaleFactor, cfg.Instances)
	started := time.Now()
	k, err := SeedKeyspace(ctx, h.redis.Client(), h.redis.URI(), KeyspaceSpec{Cluster: "scale", Layout: layout, DB: keyspaceDB,
		Instances: cfg.Instances, Blocks: small, Locations: cfg.Locations, Garbage: cfg.Garbage, Tricky: cfg.Tricky,
		Seed: cfg.Seed, Root: filepath.Join(h.workDir, "data-"+layout.String()+"-scale"), NoFiles: true}, h.log)
	if err != nil {
		return nil, err
	}
	defer k.Close()
	res.Small.Made = time.Since(started)
	// The small run deletes its garbage: the copies are made of the keyspace as seeded.
	if err := k.Snapshot(ctx); err != nil {
		return res, err
	}
	phase := layout.String() + "-scale-"
	if res.Small, err = h.scaleRun(ctx, phase+"small", k, res.Profile, res.Small.Made); err != nil {
		return res, err
	}
	if err := k.Restore(ctx); err != nil {
		return res, err
	}
	h.log.Info("growing the scale keyspace", "blocks", k.Counts.Blocks, "factor", scaleFactor)
	started = time.Now()
	if err := k.Grow(ctx, scaleFactor); err != nil {
		return res, err
	}
	made := time.Since(started)
	// Growing past a power of two keys leaves Redis rehashing its keys' hash table for
	// minutes, every command on the keyspace costing more meanwhile (about +40% per key of
	// the walk: the cost phase measures it); a store of that size is not always rehashing.
	var rehashed time.Duration
	if rehashing, err := isRehashing(ctx, k); err != nil {
		return res, err
	} else if rehashing {
		started = time.Now()
		if err := waitRehashed(ctx, k, 30*time.Minute); err != nil {
			return res, err
		}
		rehashed = time.Since(started)
	}
	res.Large, err = h.scaleRun(ctx, phase+"large", k, res.Profile, made)
	res.Large.Rehashed = rehashed
	return res, err
}

// scaleRun is each stage alone on k at its size now.
func (h *Harness) scaleRun(ctx context.Context, phase string, k *Keyspace, p stage.Profile, made time.Duration) (ScaleSize, error) {
	s := ScaleSize{Counts: k.Counts, Made: made, RedisMemory: redisUsedMemory(ctx, h.redis.Client())}
	h.log.Info("scale", "phase", phase, "blocks", k.Counts.Blocks, "redis_memory_mb", s.RedisMemory>>20)
	a, err := h.runAlone(ctx, phase, k, p)
	s.Alone = &a
	return s, err
}

// scaleChange is b against a, as a relative change.
func scaleChange(a, b float64) float64 {
	if a <= 0 {
		return 0
	}
	return b/a - 1
}

// scaleLabel is "1,000,000 → 10,000,000 blocks".
func scaleLabel(r *ScaleResults) string {
	return fmt.Sprintf("%s → %s blocks", num(float64(r.Small.Counts.Blocks)), num(float64(r.Large.Counts.Blocks)))
}

// scaleSummaryRows are the summary rows of the scale phase: each stage's rate and memory at
// the two sizes, and whether they are within 10%. As in the memory comparison, the
// deleter's band is judged on its time-weighted mean RSS, its peak against 150 MB only.
func scaleSummaryRows(row func(measurement, gc, base, ratio, target, met string), r *ScaleResults) {
	s, l := r.Small.Alone, r.Large.Alone
	if s == nil || l == nil || l.Deleter.Stage == "" {
		return
	}
	label := scaleLabel(r)
	for _, pair := range [][2]StageRun{{s.Scanner, l.Scanner}, {s.Prober, l.Prober}, {s.Deleter, l.Deleter}} {
		a, b := pair[0], pair[1]
		ch := scaleChange(a.Rate(), b.Rate())
		target, met := "within 10%", yes(a.Rate() > 0 && within(ch, TargetRSSGrowth))
		if b.Stage == "deleter" {
			// The deleter's rate is the garbage's, whose requests are the same at both sizes;
			// not one of the targets.
			target, met = "", ""
		}
		row(fmt.Sprintf("%s alone, metadata only (stat probe off), %s", b.Stage, label),
			fmt.Sprintf("%s → %s %s/s", num(a.Rate()), num(b.Rate()), unit(b.Stage)), "", fmt.Sprintf("%+.0f%%", 100*ch), target, met)
	}
	for _, pair := range [][2]StageRun{{s.Scanner, l.Scanner}, {s.Prober, l.Prober}, {s.Deleter, l.Deleter}} {
		a, b := pair[0], pair[1]
		ch := scaleChange(float64(a.Usage.PeakRSS), float64(b.Usage.PeakRSS))
		okMB := a.Usage.PeakRSS <= TargetRSS && b.Usage.PeakRSS <= TargetRSS
		target, met := "≤ 150 MB, within 10%", yes(a.Usage.PeakRSS > 0 && okMB && within(ch, TargetRSSGrowth))
		if b.Stage == "deleter" {
			target, met = "≤ 150 MB (the 10% band: the time-weighted mean, next row)", yes(a.Usage.PeakRSS > 0 && okMB)
		}
		row(fmt.Sprintf("%s peak RSS, metadata only, %s", b.Stage, label), mb(a.Usage.PeakRSS)+" → "+mb(b.Usage.PeakRSS),
			fmt.Sprintf("time-weighted mean %s → %s", mbOrDash(a.MeanRSS()), mbOrDash(b.MeanRSS())), fmt.Sprintf("%+.0f%%", 100*ch), target, met)
	}
	if a, b := s.Deleter.MeanRSS(), l.Deleter.MeanRSS(); a > 0 && b > 0 {
		ch := scaleChange(float64(a), float64(b))
		row(fmt.Sprintf("deleter RSS, time-weighted mean over its run, metadata only, %s", label), mb(a)+" → "+mb(b),
			fmt.Sprintf("peak %s → %s", mb(s.Deleter.Usage.PeakRSS), mb(l.Deleter.Usage.PeakRSS)), fmt.Sprintf("%+.0f%%", 100*ch),
			"within 10%", yes(within(ch, TargetRSSGrowth)))
	}
}

// scaleReport is the scale phase's section.
func scaleReport(w func(string, ...any), lay kvcm.Layout, r *ScaleResults) {
	w("### Metadata only at two sizes, %s layout\n\n", lay)
	w("Each stage alone (profile %s, streams without a size cap) on a metadata-only keyspace (no data files; the deleter's unlinks find none), then on the same keyspace grown to %d times its size by %d copies of every block made by Redis (COPY) under keys of the same instances, so both sizes have the same shape exactly. With the stat probe off the prober finds the orphan WRITING locations, not the storage-missing SERVING ones. The keyspaces are not verified (nothing was read back after seeding); the locations deleted at the larger size should be %d times those at the smaller.\n\n",
		r.Profile.Name, scaleFactor, scaleFactor-1, scaleFactor)
	w("| size | blocks | locations | garbage | made in | Redis used_memory |\n|---|---|---|---|---|---|\n")
	for _, sz := range []struct {
		name string
		s    ScaleSize
		how  string
	}{{"small", r.Small, "seeded"}, {"large", r.Large, "copied"}} {
		if sz.s.Alone == nil {
			continue
		}
		c := sz.s.Counts
		blocks := num(float64(c.Blocks))
		if c.SkippedBlocks > 0 {
			blocks += fmt.Sprintf(" (+%s of the cached group)", num(float64(c.SkippedBlocks)))
		}
		how := sz.how
		if sz.s.Rehashed > 0 {
			how += fmt.Sprintf("; Redis rehashed its keys' table for %s more, waited for with hz 500", sz.s.Rehashed.Round(100*time.Millisecond))
		}
		w("| %s | %s | %s | %s | %s (%s) | %s |\n", sz.name, blocks, num(float64(c.Locations)), num(float64(c.Garbage)),
			sz.s.Made.Round(100*time.Millisecond), how, mb(sz.s.RedisMemory))
	}
	if s, l := r.Small.Alone, r.Large.Alone; s != nil && l != nil && s.Deleter.Items > 0 {
		w("\nLocations deleted: %s at the smaller size, %s at the larger, %.2f times as many.\n", num(float64(s.Deleter.Items)),
			num(float64(l.Deleter.Items)), float64(l.Deleter.Items)/float64(s.Deleter.Items))
	}
	w("\n")
	for _, sz := range []ScaleSize{r.Small, r.Large} {
		if a := sz.Alone; a != nil && a.Scanner.Stage != "" {
			w("**%s blocks.**\n\n", num(float64(sz.Counts.Blocks)))
			aloneTable(w, a)
			w("\nNot verified (metadata only). %s\n\n", deleterOutcomes(a.Deleter.Metrics))
		}
	}
}
