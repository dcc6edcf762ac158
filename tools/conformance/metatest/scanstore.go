package metatest

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// FullStoreScan walks a whole store from cursor 0 back to 0 with the given COUNT, reading the
// keys of the instances in owned, and returns every entry by key, every bad key and the number
// of unowned keys seen. SCAN may return a key twice; a duplicate must carry the same values.
func FullStoreScan(t *testing.T, sc meta.Scanner, owned []string, count, maxPages int) (map[string]meta.Entry, map[string]bool, int) {
	t.Helper()
	c := ctx(t)
	owns := func(id string) bool { return slices.Contains(owned, id) }
	entries := make(map[string]meta.Entry)
	bad := make(map[string]bool)
	unowned := 0
	var cursor uint64
	for page := 0; ; page++ {
		require.Less(t, page, maxPages, "store scan did not return to cursor 0")
		p, err := sc.ScanStore(c, cursor, count, owns)
		require.NoError(t, err, "scan store cursor %d", cursor)
		for _, e := range p.Entries {
			require.True(t, owns(e.Instance), "entry %q of instance %q, which was not asked for", e.Key, e.Instance)
			if prev, dup := entries[e.Key]; dup {
				require.Equal(t, prev, e, "duplicate entry %q differs", e.Key)
			}
			entries[e.Key] = e
		}
		for _, k := range p.BadKeys {
			bad[k] = true
		}
		unowned += p.Unowned
		if p.Next == 0 {
			return entries, bad, unowned
		}
		cursor = p.Next
	}
}

// requireStoreScan checks a store-wide walk reading the instances in owned against the
// per-instance expectations: the same entries (each naming its instance), and the same bad
// keys except those that a longer owned id claims as its own block (an id may contain
// ":cache_").
func requireStoreScan(t *testing.T, sc meta.Scanner, f Fixture, owned []string, count int) {
	t.Helper()
	wantEntries := map[string]meta.Entry{}
	wantBad := map[string]bool{}
	for _, id := range owned {
		maps.Copy(wantEntries, f.Instances[id].Entries)
		maps.Copy(wantBad, f.Instances[id].BadKeys)
	}
	for k := range wantEntries {
		delete(wantBad, k)
	}
	entries, bad, unowned := FullStoreScan(t, sc, owned, count, 100000)
	require.Equal(t, slices.Sorted(maps.Keys(wantEntries)), slices.Sorted(maps.Keys(entries)), "entry keys")
	for k, e := range wantEntries {
		require.Equal(t, e, entries[k], "entry %q", k)
	}
	require.Equal(t, slices.Sorted(maps.Keys(wantBad)), slices.Sorted(maps.Keys(bad)), "bad keys")
	// Every other block key of the fixture was seen and left unread (SCAN may repeat keys).
	others := 0
	for _, k := range f.Keys {
		_, ok := kvcm.OwnerOf(k.Key, func(id string) bool { return slices.Contains(owned, id) })
		if !ok && strings.HasPrefix(k.Key, "kvcache:instance_") {
			others++
		}
	}
	require.GreaterOrEqual(t, unowned, others, "unowned keys")
}

// scanStore: one walk over the store reads every instance's blocks, and only those of the
// instances asked for.
func (s suite) scanStore(t *testing.T) {
	st := s.h.NewStore(t, Options{})
	f := NewFixture()
	s.load(t, f)
	all := slices.Sorted(maps.Keys(f.Instances))
	for _, count := range []int{1, 10, 1000} {
		requireStoreScan(t, st, f, all, count)
	}
	t.Run("some instances", func(t *testing.T) {
		// inst1 without inst1:cache_9 takes that id's key as a bad key of its own, as its
		// own MATCH scan does; a[1]* without a1, a1zz.
		requireStoreScan(t, st, f, []string{"inst1", "a[1]*", "*"}, 10)
	})
	t.Run("no instance", func(t *testing.T) {
		entries, bad, unowned := FullStoreScan(t, st, nil, 1000, 1000)
		require.Empty(t, entries)
		require.Empty(t, bad)
		require.Positive(t, unowned)
	})
	t.Run("count must be positive", func(t *testing.T) {
		_, err := st.ScanStore(ctx(t), 0, 0, func(string) bool { return true })
		require.Error(t, err)
	})
}
