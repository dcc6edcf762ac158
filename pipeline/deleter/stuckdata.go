package deleter

import (
	"strconv"
	"strings"

	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// Reasons the data of a stuck DELETING location is left in place (only its metadata goes),
// the "reason" label of kvcm_gc_stuck_deleting_data_left_total.
const (
	// DataLeftReusable: the storage may reuse the object's name or address for other data
	// (pace and pace_ssd offsets after a free, mooncake keys, vcns_hf3fs).
	DataLeftReusable = "reusable_storage"
	// DataLeftShared: a file several blocks share (blkid, key_count_per_file > 1).
	DataLeftShared = "shared"
	// DataLeftNotPerBlock: a file or hf3fs object whose name is not KVCM's per-block name
	// <instance>/<spec>/<hex block key>.
	DataLeftNotPerBlock = "not_per_block_name"
	// DataLeftReferenced: another location of the block names the same object at the unlink.
	DataLeftReferenced = "referenced"
	// DataLeftOther: the URI does not parse, or its storage is unknown.
	DataLeftOther = "unknown_storage"
)

// stuckDataLeft says why the data behind spec uri u of a stuck DELETING location of block key
// of instance must stay ("" when it may be unlinked): only a file or hf3fs object named per
// block, which KVCM would name the same way for any write of this block and which it blocks
// every rewrite of the block while this DELETING exists, so the name cannot have been reused.
func stuckDataLeft(instance string, key int64, spec kvcm.Spec, u kvcm.DataURI, be storage.Backend) string {
	if be == nil {
		return DataLeftOther
	}
	switch be.Type() {
	case kvcm.TypeFile, kvcm.TypeHF3FS:
	default:
		return DataLeftReusable
	}
	if u.Shared() || be.KeyCountPerFile() > 1 {
		return DataLeftShared
	}
	name := "/" + instance + "/" + spec.Name + "/" + strconv.FormatUint(uint64(key), 16)
	if !strings.HasSuffix(u.Path, name) {
		return DataLeftNotPerBlock
	}
	return ""
}
