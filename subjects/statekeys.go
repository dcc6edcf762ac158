package subjects

import (
	"errors"
	"fmt"
	"strings"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// Keys of the scanner's buckets. A scanner walks each metadata store of the cluster on its
// own: a store has a lease in the LEASE bucket and a checkpoint in the STATE bucket, both
// named by the store (the registry's credential-free name, e.g. "10.0.0.7:6379"):
//
//	LEASE  store.<enc store>        the store's lease (holder, since, renewed): fencing by revision
//	LEASE  member.<enc holder>      a scanner replica's presence, renewed with its leases
//	STATE  checkpoint.<enc store>   the store's round, cursor, progress and next round time
//	STATE  stores                   the registry's stores as the scanners last read them
//	STATE  scanner_pause            an operator's pause of every walk
//	STATE  walker_pause             an operator's pause of every sweep walk
//	STATE  round_start              an operator's requests that stores start their next round now
//	STATE  deleted_keys.<b64 inst>  the deleter's count of an instance's deleted block keys and removed bytes
//
// A bucket key allows only [-/_=.A-Za-z0-9], and a '.' splits it into subject tokens, so the
// store or holder name is encoded by EncodeKeyPart: bytes of [A-Za-z0-9_-] are kept, a '.'
// too where it leaves no empty token, and every other byte becomes =XX (upper-case hex).
// "10.0.0.7:6379" is "store.10.0.0.7=3A6379"; distinct names give distinct keys.
const (
	storeLeasePrefix = "store."
	memberPrefix     = "member."
	checkpointPrefix = "checkpoint."

	// StoresKey is the STATE key of the stores index (see StoreIndex in pipeline/scanner).
	StoresKey = "stores"
	// ScannerPauseKey is the STATE key of an operator's pause of every walk of the scanners
	// (see PauseRecord in pipeline): the scanner has no consumer that JetStream could pause.
	ScannerPauseKey = "scanner_pause"
	// WalkerPauseKey is the STATE key of an operator's pause of every walk of the sweep's
	// walkers, which have no consumer either.
	WalkerPauseKey = "walker_pause"
	// RoundStartKey is the STATE key of an operator's requests that the scanners start the
	// next round of stores now instead of at the end of the round pause (see RoundStartRecord
	// in pipeline): the admin writes it (kvcm-gc round start), the scanners read it.
	RoundStartKey = "round_start"
)

// ErrBadKey: a bucket key is not one this package produces.
var ErrBadKey = errors.New("bad bucket key")

// StoreLeaseKey is the LEASE key of a store's lease.
func StoreLeaseKey(store string) string { return storeLeasePrefix + EncodeKeyPart(store) }

// MemberKey is the LEASE key of a scanner replica's presence.
func MemberKey(holder string) string { return memberPrefix + EncodeKeyPart(holder) }

// CheckpointKey is the STATE key of a store's checkpoint.
func CheckpointKey(store string) string { return checkpointPrefix + EncodeKeyPart(store) }

// StoreLeaseFilter matches every store lease key.
func StoreLeaseFilter() string { return storeLeasePrefix + ">" }

// MemberFilter matches every member key.
func MemberFilter() string { return memberPrefix + ">" }

// CheckpointFilter matches every store checkpoint key.
func CheckpointFilter() string { return checkpointPrefix + ">" }

// DeletedKeysFilter matches every key of the deleter's counts of deleted block keys.
func DeletedKeysFilter() string { return deletedKeysPrefix + ">" }

// deletedKeysPrefix starts the deleter's keys (pipeline's DeletedKeysKey).
const deletedKeysPrefix = "deleted_keys."

// StoreOfLeaseKey returns the store a lease key names.
func StoreOfLeaseKey(key string) (string, error) { return partOf(key, storeLeasePrefix) }

// HolderOfMemberKey returns the holder a member key names.
func HolderOfMemberKey(key string) (string, error) { return partOf(key, memberPrefix) }

// StoreOfCheckpointKey returns the store a checkpoint key names.
func StoreOfCheckpointKey(key string) (string, error) { return partOf(key, checkpointPrefix) }

func partOf(key, prefix string) (string, error) {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return "", fmt.Errorf("%w: %q does not start with %q", ErrBadKey, key, prefix)
	}
	return DecodeKeyPart(rest)
}

const keyHex = "0123456789ABCDEF"

// EncodeKeyPart encodes any string into the tail of a bucket key (see the package's key
// list): the bytes of a subject token (kvcm.TokenSafe) are kept, and a '.' between two other
// bytes that are not dots (so no token is empty); every other byte becomes =XX (upper-case
// hex). The empty string is "=". DecodeKeyPart inverts it.
func EncodeKeyPart(s string) string {
	if s == "" {
		return "="
	}
	return kvcm.Escape(s, '=', 8, func(i int) bool {
		keepDot := s[i] == '.' && i > 0 && i+1 < len(s) && s[i-1] != '.' && s[i+1] != '.'
		return kvcm.TokenSafe(s[i]) || keepDot
	})
}

// DecodeKeyPart inverts EncodeKeyPart.
func DecodeKeyPart(p string) (string, error) {
	if p == "=" {
		return "", nil
	}
	if p == "" {
		return "", fmt.Errorf("%w: empty key part", ErrBadKey)
	}
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '=':
			if i+2 >= len(p) {
				return "", fmt.Errorf("%w: %q: truncated escape", ErrBadKey, p)
			}
			hi, lo := strings.IndexByte(keyHex, p[i+1]), strings.IndexByte(keyHex, p[i+2])
			if hi < 0 || lo < 0 {
				return "", fmt.Errorf("%w: %q: bad escape", ErrBadKey, p)
			}
			b.WriteByte(byte(hi<<4 | lo))
			i += 2
		case kvcm.TokenSafe(c) || c == '.':
			b.WriteByte(c)
		default:
			return "", fmt.Errorf("%w: %q: byte %q", ErrBadKey, p, c)
		}
	}
	return b.String(), nil
}
