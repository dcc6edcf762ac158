package kvcm

import (
	"math"
	"strconv"
	"time"
)

// Age returns the age of a location at now: from CreateTimeUs when present, else from the
// block's __lru_time__ (lruTime is the raw field, decimal µs). ok is false when the time is
// absent, unparsable, non-positive, or in the future (callers then skip: fail closed).
//
// __lru_time__ is the block's last write, so it is a lower bound of every location's age: the
// fallback can only make a location look younger, never older (DESIGN.md §8 invariant 2).
// A create_time that is not positive is treated as absent. lruTime must be the canonical
// decimal KVCM writes; an age too large for a Duration saturates.
func Age(loc *Location, lruTime string, now time.Time) (age time.Duration, ok bool) {
	var t int64
	if loc != nil && loc.HasCreateTime && loc.CreateTimeUs > 0 {
		t = loc.CreateTimeUs
	} else {
		v, err := strconv.ParseInt(lruTime, 10, 64)
		if err != nil || !canonicalInt(lruTime) || v <= 0 {
			return 0, false
		}
		t = v
	}
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
