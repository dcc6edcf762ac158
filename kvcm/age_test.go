package kvcm

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLegacyAge(t *testing.T) {
	now := time.UnixMicro(1767225600000000) // 2026-01-01T00:00:00Z
	nowUs := now.UnixMicro()
	us := func(d time.Duration) string { return strconv.FormatInt(nowUs-d.Microseconds(), 10) }
	withCT := func(v int64) *Location { return &Location{HasCreateTime: true, CreateTimeUs: v} }

	tests := []struct {
		name   string
		loc    *Location
		lru    string
		want   time.Duration
		wantOK bool
	}{
		{name: "the later of create_time and lru: lru", loc: withCT(nowUs - 48*time.Hour.Microseconds()), lru: us(time.Hour), want: time.Hour, wantOK: true},
		{name: "the later of create_time and lru: create_time", loc: withCT(nowUs - time.Hour.Microseconds()), lru: us(48 * time.Hour), want: time.Hour, wantOK: true},
		{name: "create_time now", loc: withCT(nowUs), lru: "", want: 0, wantOK: true},
		{name: "create_time in the future", loc: withCT(nowUs + 1), lru: us(48 * time.Hour), wantOK: false},
		{name: "create_time without lru", loc: withCT(nowUs - 30*time.Hour.Microseconds()), lru: "", want: 30 * time.Hour, wantOK: true},
		{name: "create_time with an lru that does not parse", loc: withCT(nowUs - 30*time.Hour.Microseconds()), lru: "junk", wantOK: false},
		{name: "create_time zero falls back to lru", loc: withCT(0), lru: us(2 * time.Hour), want: 2 * time.Hour, wantOK: true},
		{name: "create_time negative falls back to lru", loc: withCT(-1), lru: us(3 * time.Hour), want: 3 * time.Hour, wantOK: true},
		{name: "create_time zero, lru absent", loc: withCT(0), lru: "", wantOK: false},
		{name: "value without HasCreateTime ignored", loc: &Location{CreateTimeUs: 1}, lru: us(time.Minute), want: time.Minute, wantOK: true},
		{name: "no create_time, lru", loc: &Location{}, lru: us(25 * time.Hour), want: 25 * time.Hour, wantOK: true},
		{name: "nil location, lru", loc: nil, lru: us(time.Second), want: time.Second, wantOK: true},
		{name: "lru absent", loc: &Location{}, lru: "", wantOK: false},
		{name: "lru garbage", loc: &Location{}, lru: "yesterday", wantOK: false},
		{name: "lru with space", loc: &Location{}, lru: " " + us(time.Hour), wantOK: false},
		{name: "lru with plus", loc: &Location{}, lru: "+" + us(time.Hour), wantOK: false},
		{name: "lru leading zero", loc: &Location{}, lru: "0" + us(time.Hour), wantOK: false},
		{name: "lru float", loc: &Location{}, lru: us(time.Hour) + ".5", wantOK: false},
		{name: "lru zero", loc: &Location{}, lru: "0", wantOK: false},
		{name: "lru negative", loc: &Location{}, lru: "-5", wantOK: false},
		{name: "lru overflow", loc: &Location{}, lru: "9223372036854775808", wantOK: false},
		{name: "lru in the future", loc: &Location{}, lru: strconv.FormatInt(nowUs+1, 10), wantOK: false},
		{name: "lru in seconds looks ancient, still ok", loc: &Location{}, lru: "1767225600", want: time.Duration(nowUs-1767225600) * time.Microsecond, wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := LegacyAge(tt.loc, tt.lru, now)
			require.Equal(t, tt.wantOK, ok)
			if ok {
				require.Equal(t, tt.want, got)
			} else {
				require.Zero(t, got)
			}
		})
	}
}

func TestAgeExtremes(t *testing.T) {
	// Far-future now against an early time: the age saturates instead of wrapping negative.
	far := time.UnixMicro(math.MaxInt64)
	got, ok := LegacyAge(&Location{HasCreateTime: true, CreateTimeUs: 1}, "", far)
	require.True(t, ok)
	require.Equal(t, time.Duration(math.MaxInt64), got)

	// A now before the epoch is before every valid time.
	_, ok = LegacyAge(nil, "1", time.UnixMicro(-1))
	require.False(t, ok)
	_, ok = LegacyAge(nil, "9223372036854775807", time.UnixMicro(math.MinInt64))
	require.False(t, ok)
	got, ok = LocationAge(&Location{HasCreateTime: true, CreateTimeUs: 1}, far)
	require.True(t, ok)
	require.Equal(t, time.Duration(math.MaxInt64), got)
}

func TestLocationAge(t *testing.T) {
	now := time.UnixMicro(1767225600000000)
	nowUs := now.UnixMicro()
	withCT := func(v int64) *Location { return &Location{HasCreateTime: true, CreateTimeUs: v} }
	tests := []struct {
		name   string
		loc    *Location
		want   time.Duration
		wantOK bool
	}{
		{name: "create_time", loc: withCT(nowUs - 48*time.Hour.Microseconds()), want: 48 * time.Hour, wantOK: true},
		{name: "create_time now", loc: withCT(nowUs), want: 0, wantOK: true},
		// 0 is data from before create_time existed: KVCM's own GC keeps it, so do we.
		{name: "create_time zero", loc: withCT(0), wantOK: false},
		{name: "create_time negative", loc: withCT(-1), wantOK: false},
		{name: "create_time in the future", loc: withCT(nowUs + 1), wantOK: false},
		{name: "no create_time", loc: &Location{}, wantOK: false},
		{name: "value without HasCreateTime ignored", loc: &Location{CreateTimeUs: 1}, wantOK: false},
		{name: "nil", loc: nil, wantOK: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := LocationAge(tt.loc, now)
			require.Equal(t, tt.wantOK, ok)
			require.Equal(t, tt.want, got)
		})
	}
}
