package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline/prober"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
)

// Stuck DELETING (collect_deleting, DESIGN §5.3): KVCM crashed between its CAS to DELETING and
// its CAD. deleting_grace must be at least an hour (and above the group's
// delay_before_delete_ms + 1h), so the scenario seeds DELETING locations that are that old
// already: legacy, by an old __lru_time__ (KVCM's CAS rewrote it); location layout, where
// only kvcm-gc's own first sight tells the age, by a first-sight record in the OBSERVED
// bucket from before round 1.

// stuckSetup turns collect_deleting on, seeds blocks of stuck DELETING locations — data on
// per-block file names (unlinked), on other names, shared files and mooncake (data left), one
// whose per-block file another location of the block names (data left, invariant 11), one
// beside a young WRITING — and one DELETING that is not stuck yet. The seed's own DELETING
// locations become stuck too: legacy, every one (their blocks' __lru_time__ is a day old),
// with their data left (their names are not per block); location layout, every other one
// (the others have no first sight yet, so they stay).
func stuckSetup(ctx context.Context, e *env) error {
	e.extra = append(e.extra, "--collect_deleting=true", "--deleting_grace", seed.StuckGrace.String())
	now := time.Now()
	inst := e.manifest.Instances[0]
	nfsRoot := filepath.Join(e.dir, "data", "nfs") + "/"
	sharedRoot := filepath.Join(e.dir, "data", "shared") + "/"
	file := func(path string) (string, error) {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return "", err
		}
		return path, os.WriteFile(path, []byte("kv"), 0o644)
	}
	nfs := func(spec, path string) string {
		return fmt.Sprintf(`{"name":%q,"uri":"file://%s%s?size=1024"}`, spec, seed.StorageNFS, path)
	}
	type loc struct {
		locJSON
		fate     Fate
		files    []string
		shared   bool
		dataLeft bool
		// observed: a first sight seed.StuckAge ago is recorded (location layout).
		observed bool
	}
	type block struct {
		young bool // legacy: a recent __lru_time__
		locs  []loc
	}
	var blocks []block
	var keys []int64
	for i := range 7 {
		key := int64(9_200_000_000 + i)
		keys = append(keys, key)
		hex := strconv.FormatUint(uint64(key), 16)
		perBlock := func(spec string) string { return nfsRoot + inst + "/" + spec + "/" + hex }
		deleting := func(id string, specs ...string) locJSON {
			return locJSON{id: id, status: kvcm.StatusDeleting, typ: kvcm.TypeFile, createTime: now.Add(-48 * time.Hour).UnixMicro(), specs: specs}
		}
		var b block
		switch i {
		case 0: // KVCM's own per-block names: the data goes with the metadata
			f0, err := file(perBlock("tp0"))
			if err != nil {
				return err
			}
			f1, err := file(perBlock("tp1"))
			if err != nil {
				return err
			}
			b.locs = []loc{{locJSON: deleting("stuckpb0", nfs("tp0", f0), nfs("tp1", f1)), fate: Go, files: []string{f0, f1}, observed: true}}
		case 1: // a name that is not per block: metadata only
			f, err := file(perBlock("tp0") + "_other")
			if err != nil {
				return err
			}
			b.locs = []loc{{locJSON: deleting("stuckren", nfs("tp0", f)), fate: Go, files: []string{f}, dataLeft: true, observed: true}}
		case 2: // a shared file: metadata only
			f, err := file(sharedRoot + inst + "/tp0/" + hex + "_shared")
			if err != nil {
				return err
			}
			spec := fmt.Sprintf(`{"name":"tp0","uri":"file://%s%s?blkid=3&size=1024"}`, seed.StorageShared, f)
			b.locs = []loc{{locJSON: deleting("stucksha", spec), fate: Go, files: []string{f}, shared: true, observed: true}}
		case 3: // mooncake: keys are reused, metadata only
			l := deleting("stuckmc0", fmt.Sprintf(`{"name":"tp0","uri":"mooncake://%s/?key=%s/tp0/%s&size=1024"}`, seed.StorageMooncake, inst, hex))
			l.typ = kvcm.TypeMooncake
			b.locs = []loc{{locJSON: l, fate: Go, observed: true}}
		case 4: // another location of the block names the per-block file: metadata only
			f, err := file(perBlock("tp0"))
			if err != nil {
				return err
			}
			serving := locJSON{id: "liveref0", status: kvcm.StatusServing, typ: kvcm.TypeFile, createTime: now.Add(-time.Hour).UnixMicro(),
				specs: []string{nfs("tp0", f)}}
			b.locs = []loc{
				{locJSON: deleting("stuckref", nfs("tp0", f)), fate: Go, files: []string{f}, dataLeft: true, observed: true},
				{locJSON: serving, fate: Keep, files: []string{f}},
			}
		case 5: // not stuck yet: DELETING for half an hour (legacy), or never seen before (location)
			f, err := file(perBlock("tp0"))
			if err != nil {
				return err
			}
			b.young = true
			b.locs = []loc{{locJSON: deleting("youngdel", nfs("tp0", f)), fate: Keep, files: []string{f}}}
		case 6: // a stuck DELETING beside a young WRITING
			f, err := file(perBlock("tp0"))
			if err != nil {
				return err
			}
			w := locJSON{id: "youngwri", status: kvcm.StatusWriting, typ: kvcm.TypeFile, createTime: now.Add(-30 * time.Minute).UnixMicro()}
			b.locs = []loc{
				{locJSON: deleting("stuckmix", nfs("tp0", f)), fate: Go, files: []string{f}, observed: true},
				{locJSON: w, fate: Keep},
			}
		}
		blocks = append(blocks, b)
	}
	obs, err := e.observer(ctx)
	if err != nil {
		return err
	}
	first := now.Add(-seed.StuckAge).UnixMicro()
	for i, b := range blocks {
		k := kvcm.BlockKey(inst, keys[i])
		lru := now.Add(-seed.StuckAge)
		if b.young {
			lru = now.Add(-30 * time.Minute)
		}
		var ls []locJSON
		for _, l := range b.locs {
			ls = append(ls, l.locJSON)
		}
		if err := e.writeBlock(ctx, k, lru.UnixMicro(), ls); err != nil {
			return err
		}
		e.keys++
		for _, l := range b.locs {
			e.base = append(e.base, Loc{Key: k, ID: l.id, Field: e.fieldOf(l.id), Fate: l.fate, Files: l.files, Shared: l.shared, DataLeft: l.dataLeft})
			if l.observed && e.layout == kvcm.LayoutLocation {
				if err := obs.Backdate(ctx, inst, keys[i], l.id, []byte(l.bytes(e.layout)), first); err != nil {
					return err
				}
			}
		}
	}
	// The seed's own DELETING locations (someone else's, live without collect_deleting).
	n := 0
	for i, l := range e.base {
		m, ok := e.manifestLoc(l)
		if !ok || m.Kind != seed.KindDeleting {
			continue
		}
		if e.layout == kvcm.LayoutLocation {
			if n++; n%2 == 0 {
				continue // no first sight yet: kept through the scenario
			}
			raw := e.rawField(ctx, l.Key, l.Field)
			if raw == nil {
				return fmt.Errorf("read the seed's DELETING %s/%s", l.Key, l.ID)
			}
			if err := obs.Backdate(ctx, m.Instance, m.Key, m.Location, raw, first); err != nil {
				return err
			}
		}
		// Their names are <hex key>_<location id>, not KVCM's per-block names.
		e.base[i].Fate, e.base[i].DataLeft = Go, true
	}
	return nil
}

// observer is the prober's first-sight store, on the suite's own connection.
func (e *env) observer(ctx context.Context) (prober.KVObserver, error) {
	kv, err := e.js.KeyValue(ctx, e.names.ObservedBucket())
	if err != nil {
		return prober.KVObserver{}, fmt.Errorf("open the observed bucket: %w", err)
	}
	return prober.KVObserver{KV: kv, TTL: 48 * time.Hour}, nil
}

// manifestLoc is the manifest's entry of an expectation, when it has one.
func (e *env) manifestLoc(l Loc) (seed.Loc, bool) {
	if e.byLoc == nil {
		e.byLoc = map[string]seed.Loc{}
		for _, m := range e.manifest.Locations {
			e.byLoc[kvcm.BlockKey(m.Instance, m.Key)+"/"+m.Location] = m
		}
	}
	m, ok := e.byLoc[l.Key+"/"+l.ID]
	return m, ok
}

// rawField reads one hash field; nil when absent.
func (e *env) rawField(ctx context.Context, key, field string) []byte {
	v, err := e.redis.Client().HGet(ctx, key, field).Bytes()
	if err != nil {
		return nil
	}
	return v
}

// stuckDeleting collects the stuck DELETING under kill -9 of random stages while a KVCM-like
// writer flips some of them to SERVING (a late FinishWriteCache) or finishes their delete (its
// executor's CAD) right after kvcm-gc nominated them. Whatever the writer did is left alone:
// a flipped location stays SERVING byte for byte, with its data, unless kvcm-gc had unlinked
// its data before the flip (then the next round collects it as storage-missing); a finished
// one is not written again.
func stuckDeleting(ctx context.Context, e *env) (string, *Expect, error) {
	w := newWriter(e, finishDeleting, e.rng.Uint64())
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	werr := make(chan error, 1)
	ready := make(chan struct{})
	go func() { werr <- w.runReady(wctx, ready) }()
	select {
	case <-ready: // subscribed before the first candidate can be published
	case err := <-werr:
		return "", nil, err
	}
	if err := e.startAll(); err != nil {
		return "", nil, err
	}
	if err := e.roundStarted(ctx, 1); err != nil {
		return "", nil, err
	}
	killed, err := e.kills(ctx, "")
	if err != nil {
		return "", nil, err
	}
	// The stuck DELETING are nominated in round 1; the writer reacts until it is over.
	if err := e.waitFor(ctx, "the end of round 1", func() bool {
		ck, err := e.checkpoint(ctx)
		return err == nil && (ck.Round > 1 || ck.Round == 1 && !ck.InRound)
	}); err != nil {
		return "", nil, err
	}
	stop()
	if err := <-werr; err != nil {
		return "", nil, err
	}
	if err := w.err(); err != nil {
		return "", nil, err
	}
	x, err := w.expect(ctx)
	if err != nil {
		return w.summary(), nil, err
	}
	outcomes := map[string]int{}
	if err := e.readEvents(ctx, func(ev subjects.Event) {
		if ev.Kind == subjects.EventDelete && ev.Reason == subjects.ReasonStuckDeleting {
			outcomes[ev.Outcome]++
		}
	}); err != nil {
		return "", nil, err
	}
	parts := []string{}
	for _, o := range []string{subjects.OutcomeDeleted, subjects.OutcomePartial, subjects.OutcomeNoopMismatch, subjects.OutcomeNoopGone, subjects.OutcomeError} {
		if outcomes[o] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", outcomes[o], o))
		}
	}
	stuck, left, kept := 0, 0, 0
	for _, l := range e.base {
		if !wasDeleting(e.before[l.Key].Fields, l.Field, l.ID) {
			continue
		}
		switch {
		case l.Fate == Keep:
			kept++
		case l.keepsFiles() || len(l.Files) == 0:
			stuck, left = stuck+1, left+1
		default:
			stuck++
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "none yet")
	}
	return fmt.Sprintf("%d stuck DELETING to collect (%d of them leaving their data), %d DELETING not stuck; %s; %s; stuck deletes by the writer's end: %s",
		stuck, left, kept, killed, w.summary(), strings.Join(parts, ", ")), &x, nil
}
