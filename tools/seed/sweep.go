package seed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// With Spec.SweepFiles the seed adds, on storage nfs_01, data files named as KVCM names the
// file of a block (<instance>/<spec>/<hex of the key as uint64>), for the sweep of orphan data
// files: orphans (the block is absent, or no location of it names the file) and files that
// look like orphans but must stay — named by a location (SERVING, a young WRITING, someone
// else's DELETING), modified within the sweep's grace, shared names, names KVCM never writes,
// of unregistered instances, unknown specs or skipped groups, named after corrupt, ambiguous
// or tombstoned blocks. The blocks that name some of them are added to the keyspace (live,
// so the metadata collection leaves them alone). Every file but the young ones is dated
// twice the sweep's grace back; each holds bytes of its own, which the verification compares.

// Fates of a sweep file (SweepFile.Fate).
const (
	SweepOrphan = "orphan" // the sweep must remove it
	SweepKept   = "kept"   // the sweep must leave it byte for byte (SweepFile.Reason says why)
)

// The reasons a sweep file is kept or removed, as the sweep's metrics and events name them.
const (
	SweepReasonAbsent        = "block_absent"
	SweepReasonUnreferenced  = "no_location_names_it"
	SweepReasonReferenced    = "referenced"
	SweepReasonYoung         = "young"
	SweepReasonShared        = "shared"
	SweepReasonUnparsable    = "unparsable"
	SweepReasonUnknownInst   = "unknown_instance"
	SweepReasonUnknownSpec   = "unknown_spec"
	SweepReasonGroupSkipped  = "group_skipped"
	SweepReasonCorrupt       = "corrupt"
	SweepReasonAmbiguous     = "ambiguous_layout"
	SweepReasonTombstone     = "tombstone"
	sweepInstanceUnknownBase = "ghost"
)

// Kinds of the live locations that name sweep files.
const (
	KindSweepServing  = "sweep_serving"  // SERVING, both specs' per-block files exist
	KindSweepWriting  = "sweep_writing"  // WRITING within the orphan grace
	KindSweepDeleting = "sweep_deleting" // someone else's DELETING
	KindSweepHalf     = "sweep_half"     // SERVING of one spec; the other spec's file is an orphan
)

// SweepFile is one data file the seed wrote for the sweep.
type SweepFile struct {
	Path   string `json:"path"`
	Fate   string `json:"fate"`   // SweepOrphan or SweepKept
	Reason string `json:"reason"` // why (a SweepReason*)
	Size   int    `json:"size"`
}

// sweepSetup writes the sweep's files and the blocks that name some of them.
func (g *gen) sweepSetup(ctx context.Context) error {
	rng := rand.New(rand.NewPCG(g.sp.Seed^0x7377656570, g.sp.Seed))
	grace := g.sp.SweepGrace
	if grace <= 0 {
		grace = 24 * time.Hour
	}
	old := g.sp.Now.Add(-2 * grace)
	location := g.sp.Layout == kvcm.LayoutLocation
	g.m.SweepRoot = g.nfsRoot
	fresh := g.freshKeys(rng)
	keyOf := map[string][2]any{} // redis key -> instance, block key of the special keys
	for _, lists := range [][]string{g.m.Corrupt, g.m.Ambiguous, g.m.Tombstones} {
		for _, k := range lists {
			inst, ok := kvcm.OwnerOf(k, func(id string) bool { return slices.Contains(g.sp.Instances, id) })
			if !ok {
				continue
			}
			key, err := kvcm.ParseBlockKey(inst, k)
			if err != nil {
				continue
			}
			keyOf[k] = [2]any{inst, key}
		}
	}
	var errs []error
	file := func(name string, mtime time.Time, fate, reason string) string {
		p := g.nfsRoot + name
		size := 1024 * (1 + rng.IntN(8))
		if err := writeSweepFile(p, size, mtime); err != nil {
			errs = append(errs, err)
		}
		g.m.SweepFiles = append(g.m.SweepFiles, SweepFile{Path: p, Fate: fate, Reason: reason, Size: size})
		return p
	}
	perBlock := func(inst, spec string, key int64) string { return kvcm.BlockObjectName(inst, spec, key) }
	uri := func(p string) string { return "file://" + StorageNFS + p + "?size=1024" }

	n := max(3, g.sp.Blocks/200)
	for _, inst := range g.sp.Instances {
		for i := range n {
			// Blocks whose locations name per-block files.
			for _, kind := range []string{KindSweepServing, KindSweepWriting, KindSweepDeleting, KindSweepHalf} {
				key := fresh(inst)
				p0 := file(perBlock(inst, "tp0", key), old, SweepKept, SweepReasonReferenced)
				var p1 string
				if kind == KindSweepHalf {
					p1 = file(perBlock(inst, "tp1", key), old, SweepOrphan, SweepReasonUnreferenced)
				} else {
					p1 = file(perBlock(inst, "tp1", key), old, SweepKept, SweepReasonReferenced)
				}
				l := locationJSON{ID: g.sweepLocID(rng), Type: uint8(kvcm.TypeFile), Status: 3,
					CreateTime: g.sp.Now.Add(-72 * time.Hour).UnixMicro()}
				l.Specs = []kvcm.Spec{{Name: "tp0", URI: uri(p0)}, {Name: "tp1", URI: uri(p1)}}
				lru := g.sp.Now.Add(-72 * time.Hour)
				files := []string{p0, p1}
				switch kind {
				case KindSweepWriting:
					// Younger than the orphan grace (and, legacy, its block's last write too).
					l.Status, l.CreateTime, lru = 2, g.sp.Now.Add(-time.Hour).UnixMicro(), g.sp.Now.Add(-time.Hour)
				case KindSweepDeleting:
					l.Status = 4
					if g.sp.DeletingGrace > 0 {
						// Deleting right now, not stuck: a collector of stuck DELETING keeps it
						// (and its files, which the sweep must see referenced).
						lru = g.sp.Now.Add(-time.Hour)
					}
				case KindSweepHalf:
					l.Specs, files = l.Specs[:1], files[:1]
				}
				l.SpecSize = uint64(len(l.Specs))
				class := kvcm.LayoutLegacy.String()
				var fields []any
				if location {
					class = kvcm.LayoutLocation.String()
					fields = []any{kvcm.FieldPrevKey, "", kvcm.LocationField(l.ID), string(l.bytes())}
				} else {
					l.NoCreateTime = true
					fields = []any{kvcm.FieldURI, string(appendLegacyMap(nil, []string{l.ID}, []locationJSON{l})), kvcm.FieldLRUTime, us(lru)}
				}
				field := kvcm.FieldURI
				if location {
					field = kvcm.LocationField(l.ID)
				}
				if err := g.record(g.m.Layouts, class, []Loc{{Instance: inst, Key: key, Location: l.ID, Kind: kind, Layout: class, Field: field}}); err != nil {
					return err
				}
				g.m.Locations[len(g.m.Locations)-1].Files = files // written above, dated
				if err := g.block(ctx, inst, key, fields); err != nil {
					return err
				}
				g.extraBlocks++
			}
			// Orphans of absent blocks, both specs.
			key := fresh(inst)
			file(perBlock(inst, "tp0", key), old, SweepOrphan, SweepReasonAbsent)
			file(perBlock(inst, "tp1", key), old, SweepOrphan, SweepReasonAbsent)
			// What looks like an orphan and must stay.
			file(perBlock(inst, "tp0", fresh(inst)), g.sp.Now, SweepKept, SweepReasonYoung)
			file(perBlock(inst, "tp1", fresh(inst))+fmt.Sprintf("_%x", rng.Uint64()|1<<60), old, SweepKept, SweepReasonShared)
			hex := strconv.FormatUint(uint64(fresh(inst)), 16)
			bad := []string{strings.ToUpper(hex) + "X", "0" + hex, hex + ".tmp"}[i%3]
			file(inst+"/tp0/"+bad, old, SweepKept, SweepReasonUnparsable)
			file(perBlock(inst, "tp9", fresh(inst)), old, SweepKept, SweepReasonUnknownSpec)
		}
	}
	skipped := []string{InstanceLocal}
	if location {
		skipped = append(skipped, InstanceCached)
	}
	for i := range n {
		file(perBlock(sweepInstanceUnknownBase+strconv.Itoa(i), "tp0", int64(rng.Uint64())), old, SweepKept, SweepReasonUnknownInst)
		for _, inst := range skipped {
			file(perBlock(inst, "tp0", fresh(inst)), old, SweepKept, SweepReasonGroupSkipped)
		}
	}
	for _, special := range []struct {
		keys   []string
		reason string
	}{{g.m.Corrupt, SweepReasonCorrupt}, {g.m.Ambiguous, SweepReasonAmbiguous}, {g.m.Tombstones, SweepReasonTombstone}} {
		for _, k := range special.keys {
			if ik, ok := keyOf[k]; ok {
				file(perBlock(ik[0].(string), "tp0", ik[1].(int64)), old, SweepKept, special.reason)
			}
		}
	}
	return errors.Join(errs...)
}

// sweepLocID draws a location id from the sweep's own stream.
func (g *gen) sweepLocID(rng *rand.Rand) string {
	var b [8]byte
	for i := range b {
		b[i] = idChars[rng.IntN(len(idChars))]
	}
	return string(b[:])
}

// sweepContent is the content of the sweep file at path: size bytes of its own.
func sweepContent(path string, size int) []byte {
	line := []byte("kvcm block data of " + path + "\n")
	return bytes.Repeat(line, size/len(line)+1)[:size]
}

func writeSweepFile(path string, size int, mtime time.Time) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	if err := os.WriteFile(path, sweepContent(path, size), 0o644); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	return nil
}

// SweepReport is what VerifySweep found.
type SweepReport struct {
	Orphans     int `json:"orphans"`
	OrphansGone int `json:"orphans_gone"`
	OrphanBytes int `json:"orphan_bytes"`
	Kept        int `json:"kept"`
	KeptIntact  int `json:"kept_intact"`
	// KeptByReason counts the kept files by why they must stay.
	KeptByReason map[string]int `json:"kept_by_reason"`
	// OtherFiles are the live locations' other data files on the swept root (named otherwise
	// than per block), OtherIntact those still there with their bytes.
	OtherFiles  int `json:"other_files"`
	OtherIntact int `json:"other_intact"`
	// Quarantined counts the files left in the quarantine (none may be).
	Quarantined int `json:"quarantined"`

	Mismatches
}

// OK reports whether exactly the orphans are gone and every other file is byte-identical.
func (r SweepReport) OK() bool { return r.Mismatch == 0 }

// QuarantineDir is where a sweep of the root keeps quarantined files (the sweep's own name,
// repeated so the seed needs nothing of it).
const QuarantineDir = ".kvcm-gc-quarantine"

// VerifySweep checks the sweep files: every orphan gone, every other file present with the
// bytes it was written with, and nothing left in the quarantine.
func VerifySweep(m *Manifest) (SweepReport, error) {
	r := SweepReport{KeptByReason: map[string]int{}}
	for _, f := range m.SweepFiles {
		data, err := os.ReadFile(f.Path)
		present := err == nil
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return r, fmt.Errorf("verify sweep: read %s: %w", f.Path, err)
		}
		switch f.Fate {
		case SweepOrphan:
			r.Orphans++
			r.OrphanBytes += f.Size
			if present {
				r.Problem("orphan %s (%s) still there", f.Path, f.Reason)
			} else {
				r.OrphansGone++
			}
		default:
			r.Kept++
			r.KeptByReason[f.Reason]++
			switch {
			case !present:
				r.Problem("%s (%s) is gone", f.Path, f.Reason)
			case !bytes.Equal(data, sweepContent(f.Path, f.Size)):
				r.Problem("%s (%s) changed", f.Path, f.Reason)
			default:
				r.KeptIntact++
			}
		}
	}
	if m.SweepRoot == "" {
		return r, nil
	}
	// Every other live data file on the root keeps its bytes too (the seed writes "kv").
	sweepFile := map[string]bool{}
	for _, f := range m.SweepFiles {
		sweepFile[f.Path] = true
	}
	for _, l := range m.Locations {
		if l.Garbage && !l.Shared() {
			continue
		}
		for _, f := range l.Files {
			if !strings.HasPrefix(f, m.SweepRoot) || sweepFile[f] {
				continue
			}
			r.OtherFiles++
			data, err := os.ReadFile(f)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				r.Problem("live file %s is gone", f)
			case err != nil:
				return r, fmt.Errorf("verify sweep: read %s: %w", f, err)
			case string(data) != "kv":
				r.Problem("live file %s changed", f)
			default:
				r.OtherIntact++
			}
		}
	}
	q := filepath.Join(m.SweepRoot, QuarantineDir)
	err := filepath.WalkDir(q, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			r.Quarantined++
			r.Problem("left in quarantine: %s", p)
		}
		return nil
	})
	if err != nil {
		return r, fmt.Errorf("verify sweep: walk the quarantine: %w", err)
	}
	return r, nil
}
