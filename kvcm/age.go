package kvcm

import (
	"math"
	"strconv"
	"time"
)

// LocationAge returns the age at now of a location of the location layout: from its
// create_time (µs since the epoch), the only time such a block holds. ok is false when it is
// absent, not positive (0 is data written before KVCM had create_time: KVCM's own GC never
// collects it either), or in the future; callers then keep the location (fail closed).
func LocationAge(loc *Location, now time.Time) (age time.Duration, ok bool) {
	if loc == nil || !loc.HasCreateTime || loc.CreateTimeUs <= 0 {
		return 0, false
	}
	return ageSince(loc.CreateTimeUs, now)
}

// LegacyAge returns the age at now of a location of the legacy layout, from the block's
// __lru_time__ (the raw field, canonical decimal µs) and, when the location has one, its
// create_time: the later of the two, so the younger age. ok is false when neither is a
// positive time, when a present __lru_time__ does not parse, or when the time is in the
// future; callers then keep the location (fail closed).
//
// __lru_time__ is the block's last write, so it is a lower bound of every location's age:
// taking the later time can only make a location look younger, never older (DESIGN §8.2).
func LegacyAge(loc *Location, lruTime string, now time.Time) (age time.Duration, ok bool) {
	var t int64
	if lruTime != "" {
		v, err := strconv.ParseInt(lruTime, 10, 64)
		if err != nil || !canonicalInt(lruTime) || v <= 0 {
			return 0, false
		}
		t = v
	}
	if loc != nil && loc.HasCreateTime && loc.CreateTimeUs > t {
		t = loc.CreateTimeUs
	}
	if t <= 0 {
		return 0, false
	}
	return ageSince(t, now)
}

// ageSince is now − t for a positive time t in µs; ok is false when t is in the future. An
// age too large for a Duration saturates.
func ageSince(t int64, now time.Time) (time.Duration, bool) {
	nowUs := now.UnixMicro()
	if nowUs < t {
		return 0, false
	}
	d := nowUs - t // t > 0, so this cannot overflow
	if d > math.MaxInt64/int64(time.Microsecond) {
		return time.Duration(math.MaxInt64), true
	}
	return time.Duration(d) * time.Microsecond, true
}
