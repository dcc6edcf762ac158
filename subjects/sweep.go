package subjects

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// The sweep of orphan data files (DESIGN §7): a walker per swept storage lists its files and
// publishes candidates to the SWEEP stream; sweepers judge and act on them.
//
//	kvcmgc.c1.sweep.<instance>          walker → sweeper      stream KVCMGC_kvcmgc_c1_SWEEP
//	consumer "sweeper" on SWEEP (durable, pull; MaxAckPending is the sweeps in flight)
//	LEASE  sweep.<base64url storage>    the walker's lease on the storage
//	STATE  sweep.<base64url storage>    the storage's walk checkpoint (SweepCheckpoint)

const (
	kindSweep       = "sweep"
	sweeperConsumer = "sweeper"
	// sweepKeyPrefix starts the LEASE and STATE keys of a swept storage.
	sweepKeyPrefix = "sweep."
)

// SweepSubject is "<prefix>.<enc cluster>.sweep.<enc instance>".
func (n Names) SweepSubject(instance string) string {
	return n.base() + kindSweep + "." + kvcm.EncodeToken(instance)
}

// SweepFilter is "<prefix>.<enc cluster>.sweep.*": every instance's sweep batches.
func (n Names) SweepFilter() string { return n.base() + kindSweep + ".*" }

// SweepStream is "KVCMGC_<prefix>_<cluster>_SWEEP".
func (n Names) SweepStream() string { return n.objectName("SWEEP") }

// Streams is every stream Ensure creates under these names, the key-value buckets' included:
// what a harness deletes to free the storage they reserve.
func (n Names) Streams() []string {
	return []string{n.BatchesStream(), n.DeletesStream(), n.EventsStream(), n.SweepStream(),
		KVStream(n.StateBucket()), KVStream(n.LeaseBucket()), KVStream(n.ObservedBucket())}
}

// SweeperConsumer is the durable pull consumer of SweepStream: "sweeper".
func (n Names) SweeperConsumer() string { return sweeperConsumer }

// SweepKey is the LEASE key of the walker's lease on a storage, and the STATE key of the
// storage's walk checkpoint: "sweep." and the name in unpadded base64url, which fits any
// storage name into a bucket key.
func SweepKey(storage string) string {
	return sweepKeyPrefix + base64.RawURLEncoding.EncodeToString([]byte(storage))
}

// SweepKeyFilter matches every SweepKey.
func SweepKeyFilter() string { return sweepKeyPrefix + "*" }

// SweepStorageOf returns the storage a SweepKey names.
func SweepStorageOf(key string) (string, error) {
	rest, ok := strings.CutPrefix(key, sweepKeyPrefix)
	if !ok || rest == "" {
		return "", fmt.Errorf("sweep key %q: not sweep.<storage>", key)
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(rest)
	if err != nil {
		return "", fmt.Errorf("sweep key %q: %w", key, err)
	}
	return string(b), nil
}

// Kinds of SweepBatch.
const (
	// SweepWalk: files of the storage's data, as the walk found them.
	SweepWalk = "walk"
	// SweepQuarantine: files in the storage's quarantine, as a look into it found them.
	SweepQuarantine = "quarantine"
)

// SweepBatch is files of one instance on one swept storage for the sweepers to judge: the
// candidates of one page of a walk, or quarantined files of one page of a look into the
// quarantine. Subject: SweepSubject(instance).
type SweepBatch struct {
	V        int    `json:"v"`        // SchemaVersion
	Cluster  string `json:"cluster"`  // KVCM cluster name
	Instance string `json:"instance"` // KVCM instance id the files' names give, verbatim
	Group    string `json:"group"`    // the instance's group when walked
	Store    string `json:"store"`    // the instance's metadata store when walked (no credentials)
	Storage  string `json:"storage"`  // the storage's global unique name
	Kind     string `json:"kind"`     // SweepWalk | SweepQuarantine
	// Round is the storage's walk round (SweepWalk) or its look into the quarantine
	// (SweepQuarantine), Page the page of it, Part the part of the instance's files of that
	// page (a page's files of one instance are split to stay below the payload limit).
	Round    uint64      `json:"round"`
	Page     uint64      `json:"page"`
	Part     int         `json:"part"`
	LeaseRev uint64      `json:"lease_rev"`    // revision of the walker's lease on the storage (fencing)
	WalkedAt int64       `json:"walked_at_us"` // when the page was read, µs since the epoch
	Files    []SweepFile `json:"files"`
}

// SweepFile is one file of a SweepBatch.
type SweepFile struct {
	// Path is the file's data path as KVCM's URIs name it (the storage's root and the object
	// name, before any local path map), exact bytes.
	Path RawText `json:"path"`
	Spec string  `json:"spec"`       // the spec the name gives
	Key  int64   `json:"key,string"` // the block key the name gives
	// Size, MtimeUs and Ino are what the walker's lstat read (of the quarantined file, for
	// SweepQuarantine): a sweeper acts only on the same file.
	Size    int64  `json:"size"`
	MtimeUs int64  `json:"mtime_us"`
	Ino     uint64 `json:"ino"`
	// Quarantine (SweepQuarantine only) is the file's name in the quarantine, relative to it,
	// exact bytes; QuarantinedUs is when it went in.
	Quarantine    RawText `json:"quarantine,omitempty"`
	QuarantinedUs int64   `json:"quarantined_us,omitempty"`
}

// Sweep outcomes (Event.Outcome of EventSweep).
const (
	SweepOutcomeQuarantined     = "quarantined"      // moved into quarantine, the re-read confirmed no location names it
	SweepOutcomeRestored        = "restored"         // moved back: a location names it (or the re-read could not tell)
	SweepOutcomeConflict        = "conflict"         // could not move back, its path is taken: both kept
	SweepOutcomeUnlinked        = "unlinked"         // unlinked after sweep_quarantine, re-checked
	SweepOutcomeKept            = "kept"             // not an orphan, or not certainly (Reason)
	SweepOutcomeGone            = "gone"             // the file is no longer there
	SweepOutcomeWouldQuarantine = "would_quarantine" // dry-run: an orphan, nothing renamed
	SweepOutcomeWouldRestore    = "would_restore"    // dry-run: a quarantined file that would move back
	SweepOutcomeWouldUnlink     = "would_unlink"     // dry-run: a quarantined orphan past sweep_quarantine
	SweepOutcomeError           = "error"            // a transient failure; the batch is redelivered
	// Walker: a round of a storage's walk started or ended (Counts).
	SweepOutcomeRoundStart = "round_start"
	SweepOutcomeRoundEnd   = "round_end"
)

// DecodeSweepBatch decodes and validates a sweep batch; every failure wraps ErrPoison.
func DecodeSweepBatch(data []byte) (SweepBatch, error) {
	return decodeValid[SweepBatch](data, "sweep batch")
}

// Validate checks what a sweeper relies on: the storage and instance, a known kind, at least
// one file, and for each an absolute path named once, a spec, and for quarantined files their
// quarantine name and time.
func (b *SweepBatch) Validate() error {
	if err := checkVersion(b.V); err != nil {
		return fmt.Errorf("sweep batch: %w", err)
	}
	switch {
	case b.Cluster == "":
		return errors.New("sweep batch: cluster is empty")
	case b.Instance == "":
		return errors.New("sweep batch: instance is empty")
	case b.Storage == "":
		return errors.New("sweep batch: storage is empty")
	case b.Kind != SweepWalk && b.Kind != SweepQuarantine:
		return fmt.Errorf("sweep batch: unknown kind %q", b.Kind)
	case b.Part < 0:
		return fmt.Errorf("sweep batch: part %d is negative", b.Part)
	case len(b.Files) == 0:
		return errors.New("sweep batch: no files")
	}
	seen := make(map[string]struct{}, len(b.Files))
	for i, f := range b.Files {
		switch {
		case len(f.Path) == 0 || f.Path[0] != '/':
			return fmt.Errorf("sweep batch: file %d: path %q is not absolute", i, f.Path)
		case f.Spec == "":
			return fmt.Errorf("sweep batch: file %d (%q): spec is empty", i, f.Path)
		case b.Kind == SweepQuarantine && (len(f.Quarantine) == 0 || f.QuarantinedUs <= 0):
			return fmt.Errorf("sweep batch: file %d (%q): quarantined without its quarantine name and time", i, f.Path)
		case b.Kind == SweepWalk && (len(f.Quarantine) != 0 || f.QuarantinedUs != 0):
			return fmt.Errorf("sweep batch: file %d (%q): a walked file with a quarantine name", i, f.Path)
		}
		k := string(f.Path) + "\x00" + string(f.Quarantine)
		if _, dup := seen[k]; dup {
			return fmt.Errorf("sweep batch: file %d repeats %q", i, f.Path)
		}
		seen[k] = struct{}{}
	}
	return nil
}

// SweepMsgID identifies a sweep batch by cluster, storage, kind, round, page, instance and
// part: a walker that reads a page again after a crash or a failover publishes it under the
// same ids. Example: "s:c1:nfs_01:w:3:17:inst0:0".
func SweepMsgID(b SweepBatch) string {
	kind := "w"
	if b.Kind == SweepQuarantine {
		kind = "q"
	}
	return "s:" + idPart(b.Cluster) + ":" + idPart(b.Storage) + ":" + kind + ":" +
		strconv.FormatUint(b.Round, 10) + ":" + strconv.FormatUint(b.Page, 10) + ":" +
		idPart(b.Instance) + ":" + strconv.Itoa(b.Part)
}
