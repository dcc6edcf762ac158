package deleter

import (
	"errors"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// Reclaim is what removing one location frees on one storage: the data objects its spec URIs
// name there, and their bytes as KVCM accounts them (each spec URI's size= parameter).
type Reclaim struct {
	Storage string // the storage's global unique name: the spec URI's host
	Files   int    // spec URIs naming it
	Bytes   uint64 // the sum of their size= parameters
}

// TargetReclaim is what deleting t frees, by storage in the order its specs first name them,
// read from the bytes the prober judged (t.Expected): the deleter's metrics and the dry-run
// report (ops.Report) take it from here, so they cannot count differently. A spec URI that
// does not parse names no storage and is left out (the deleter leaves its data too); one
// without a decimal size= counts as a file of 0 bytes. ok is false when the bytes are not a
// location.
//
// The bytes are the locations' own: data the deleter must leave in place (a shared file, a
// storage with delete: false, one kvcm-gc cannot delete from) is counted in them, and is
// counted apart by kvcm_gc_physical_delete_skips_total.
func TargetReclaim(t subjects.Target) (out []Reclaim, ok bool) {
	loc, err := kvcm.DecodeLocation(t.Location, []byte(t.Expected))
	if err != nil {
		return nil, false
	}
	for _, spec := range loc.Specs {
		u, err := kvcm.ParseDataURI(spec.URI)
		if err != nil {
			continue
		}
		size, _ := kvcm.SpecBytes([]kvcm.Spec{spec}) // KVCM's account of it; 0 without a size
		i := 0
		for i < len(out) && out[i].Storage != u.Host {
			i++
		}
		if i == len(out) {
			out = append(out, Reclaim{Storage: u.Host})
		}
		out[i].Files++
		out[i].Bytes += size
	}
	return out, true
}

// Frees reports whether a deleter outcome removed the location (deleted, partial), or in a dry
// run would have (would_delete).
func Frees(outcome string) bool {
	switch outcome {
	case subjects.OutcomeDeleted, subjects.OutcomePartial, subjects.OutcomeWouldDelete:
		return true
	}
	return false
}

// Phantom is what KVCM's usage goes on counting of a location-layout location kvcm-gc removed
// (DESIGN §13): its bytes as KVCM's own accounting reads them (kvcm.UsageOf), in its slot.
// KVCM subtracts a location's bytes only in its own deletes, so these stay in its count until
// a repair. ok is false for what KVCM's persisted usage never counted: a legacy (__uri__)
// location, a slot no KVCM version counts, bytes that are no location.
func Phantom(t subjects.Target) (slot kvcm.StorageType, bytes uint64, ok bool) {
	if t.Layout != subjects.LayoutLocation {
		return 0, 0, false
	}
	loc, err := kvcm.DecodeLocation(t.Location, []byte(t.Expected))
	if err != nil && !errors.Is(err, kvcm.ErrBadLocation) {
		return 0, 0, false
	}
	u := kvcm.UsageOf(&loc)
	if u.Slot > kvcm.MaxUsageSlot {
		return 0, 0, false
	}
	return u.Slot, u.Bytes, true
}
