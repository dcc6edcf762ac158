package demo

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/config"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
)

// run runs a small demo and returns its report.
func run(t *testing.T, o Options) (string, error) {
	t.Helper()
	var out, errs bytes.Buffer
	o.Instances, o.Blocks, o.Garbage, o.Tricky, o.Seed, o.Timeout = 2, 400, 0.2, 0.2, 3, 2*time.Minute
	o.Out, o.Err = &out, &errs
	err := Run(context.Background(), o)
	t.Logf("report:\n%s\nprogress:\n%s", out.String(), errs.String())
	return out.String(), err
}

// TestRunLegacy: the demo collects a legacy keyspace and verifies it.
func TestRunLegacy(t *testing.T) {
	out, err := run(t, Options{Layout: kvcm.LayoutLegacy})
	require.NoError(t, err)
	require.Contains(t, out, "in the legacy layout")
	require.Contains(t, out, "result              OK")
	requireStuckCollected(t, out)
}

var (
	stuckNominatedRE = regexp.MustCompile(`stuck DELETING +(\d+) nominated`)
	stuckGoneRE      = regexp.MustCompile(`stuck DELETING +(\d+)/(\d+) gone \(([^)]*)\), (\d+) files unlinked, (\d+) files left in place`)
	stuckLeftRE      = regexp.MustCompile(`data left +(\d+) locations \(([^)]*)\)`)
)

// requireStuckCollected: the report shows the seeded stuck DELETING, every one nominated and
// gone, on file and mooncake storages, their per-block files unlinked and the others' data
// left for each reason.
func requireStuckCollected(t *testing.T, out string) {
	t.Helper()
	atoi := func(s string) int {
		n, err := strconv.Atoi(s)
		require.NoError(t, err)
		return n
	}
	nominated := stuckNominatedRE.FindStringSubmatch(out)
	require.NotNil(t, nominated, "no stuck DELETING line")
	gone := stuckGoneRE.FindStringSubmatch(out)
	require.NotNil(t, gone, "no stuck DELETING verification line")
	require.Positive(t, atoi(gone[2]))
	require.Equal(t, gone[2], gone[1], "every stuck DELETING collected")
	require.Equal(t, gone[2], nominated[1], "every stuck DELETING nominated once")
	require.Contains(t, gone[3], "file ")
	require.Contains(t, gone[3], "mooncake ")
	require.Positive(t, atoi(gone[4]), "per-block files unlinked")
	require.Positive(t, atoi(gone[5]), "other data left in place")
	left := stuckLeftRE.FindStringSubmatch(out)
	require.NotNil(t, left)
	for _, reason := range []string{seed.DataLeftShared, seed.DataLeftNotPerBlock, seed.DataLeftReferenced, seed.DataLeftReusable} {
		require.Contains(t, left[2], reason+" ")
	}
}

// TestRunLocation: the demo collects a keyspace of today's KVCM and verifies it, upgraded
// blocks and the cached group left alone. It needs a collector of the location layout, which
// brings the empty_block setting.
func TestRunLocation(t *testing.T) {
	if _, ok := config.Lookup("empty_block"); !ok {
		t.Skip("this build's collector predates the location layout (no empty_block setting)")
	}
	for _, mode := range []string{seed.EmptyKeep, seed.EmptyDelete} {
		t.Run(mode, func(t *testing.T) {
			out, err := run(t, Options{EmptyBlock: mode})
			require.NoError(t, err)
			require.Contains(t, out, "in the location layout")
			require.Contains(t, out, "verification (empty_block: "+mode+")")
			require.Contains(t, out, "result              OK")
			requireStuckCollected(t, out)
			// The deletes left KVCM's usage counting what went; the repair brings it to the
			// recount.
			_, counters, ok := strings.Cut(out, "counters repair --apply:\n")
			require.True(t, ok, "the demo shows KVCM's counters")
			for _, inst := range []string{"inst0", "inst1"} {
				require.Regexp(t, `(?m)^  `+inst+` +before .*file \+[1-9]\d* B; after none$`, counters)
			}
		})
	}
}

// TestEmptyBlockSetting: the verification checks the collector's own setting; a build
// without one deletes the keys it empties.
func TestEmptyBlockSetting(t *testing.T) {
	c := config.Default()
	if _, ok := config.Lookup("empty_block"); !ok {
		got, err := setEmptyBlock(&c, "")
		require.NoError(t, err)
		require.Equal(t, seed.EmptyDelete, got)
		got, err = setEmptyBlock(&c, seed.EmptyDelete)
		require.NoError(t, err)
		require.Equal(t, seed.EmptyDelete, got)
		_, err = setEmptyBlock(&c, seed.EmptyKeep)
		require.ErrorContains(t, err, "no empty_block setting")
		return
	}
	got, err := setEmptyBlock(&c, "")
	require.NoError(t, err)
	require.Equal(t, seed.EmptyKeep, got, "keep is the collector's default")
	for _, mode := range []string{seed.EmptyDelete, seed.EmptyKeep} {
		got, err := setEmptyBlock(&c, mode)
		require.NoError(t, err)
		require.Equal(t, mode, got)
	}
}
