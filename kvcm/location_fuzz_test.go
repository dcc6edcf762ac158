package kvcm

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func FuzzDecodeBlock(f *testing.F) {
	for _, s := range []string{
		exampleURI,
		`{}`,
		`{"a":{"id":"a","status":2,"create_time":1767225600000000,"future_field":{"x":[1,2]}}}`,
		" { \"a\" : { \"status\" : 2 , \"id\" : \"a\" } } ",
		`{"a\u0062":{"\u0069d":"ab","st\u0061tus":3,"location_specs":[{"n\u0061me":"t\"p","uri":"file://h/a\/b"}]}}`,
		`{"a\u001Fb":{"id":"a\u001Fb","status":2,"location_specs":[{"name":"\b","uri":"x://h/\uD83D\uDE00"}]}}`,
		`{"a":{"id":"b","status":2},"c":{"id":"c","status":-3,"type":18446744073709551615}}`,
		`{"a":{"id":"a","status":2,"status":3}}`,
		`{"a":{"id":"a"},"a":{"id":"a"}}`,
		"{\"a\xff\":{\"id\":\"a\xff\",\"status\":3,\"n\":-0.5E+2,\"t\":[true,false,null]}}",
		`{"d":{"id":"d","status":2,"migration_copy_guard":{"schema_version":1,"state":2,"operation_id":"o","source_location_id":"s"}},"s":{"id":"s","status":3}}`,
	} {
		f.Add([]byte(s), int64(StatusDeleting))
	}
	f.Fuzz(func(t *testing.T, raw []byte, newStatus int64) {
		b, err := DecodeBlock(raw)
		if err != nil {
			require.ErrorIs(t, err, ErrCorruptURI)
			require.Nil(t, b)
			return
		}
		for i := range b.Locations {
			loc := &b.Locations[i]
			require.True(t, bytes.Contains(raw, loc.Raw))
			if loc.Err != nil {
				require.ErrorIs(t, loc.Err, ErrBadLocation)
			}
			// Without: the others survive unchanged.
			out, empty, err := b.Without(loc.ID)
			require.NoError(t, err)
			require.Equal(t, len(b.Locations) == 1, empty)
			rest, err := DecodeBlock(out)
			require.NoError(t, err, "re-decode %q", out)
			others := make([]Location, 0, len(b.Locations))
			others = append(others, b.Locations[:i]...)
			others = append(others, b.Locations[i+1:]...)
			requireSameLocations(t, others, rest.Locations)

			// WithStatus: only the target's status changes.
			out, err = b.WithStatus(loc.ID, Status(newStatus))
			if loc.Err != nil {
				require.ErrorIs(t, err, ErrBadLocation)
				continue
			}
			if err != nil {
				require.ErrorIs(t, err, ErrBadLocation) // no status member
				_, lerr := LocationWithStatus(loc.Raw, Status(newStatus))
				require.ErrorIs(t, lerr, ErrBadLocation)
				continue
			}
			nb, err := DecodeBlock(out)
			require.NoError(t, err, "re-decode %q", out)
			want := append([]Location(nil), b.Locations...)
			changed := *loc
			changed.Status = Status(newStatus)
			changed.Raw, err = LocationWithStatus(loc.Raw, Status(newStatus))
			require.NoError(t, err)
			want[i] = changed
			requireSameLocations(t, want, nb.Locations)
		}
	})
}

// requireSameLocations compares decoded locations, Raw byte for byte and Err by kind.
func requireSameLocations(t *testing.T, want, got []Location) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		w, g := want[i], got[i]
		require.Equal(t, string(w.Raw), string(g.Raw))
		require.Equal(t, errors.Is(w.Err, ErrBadLocation), errors.Is(g.Err, ErrBadLocation))
		w.Raw, g.Raw, w.Err, g.Err = nil, nil, nil, nil
		require.Equal(t, w, g)
	}
}

func BenchmarkDecodeBlock(b *testing.B) {
	b.ReportAllocs()
	raw := []byte(exampleURI)
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := DecodeBlock(raw); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkWithStatus(b *testing.B) {
	benchEdit(b, func(blk *Block) error {
		_, err := blk.WithStatus("k3j9x0cd", StatusDeleting)
		return err
	})
}

func BenchmarkWithout(b *testing.B) {
	benchEdit(b, func(blk *Block) error {
		_, _, err := blk.Without("q0x7m2ab")
		return err
	})
}

// benchEdit measures edit of the example block, decoded once.
func benchEdit(b *testing.B, edit func(*Block) error) {
	b.ReportAllocs()
	blk, err := DecodeBlock([]byte(exampleURI))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := edit(blk); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLocationWithStatus(b *testing.B) {
	b.ReportAllocs()
	raw := []byte(exampleLocA)
	for b.Loop() {
		if _, err := LocationWithStatus(raw, StatusDeleting); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzDecodeLocation: a location field's value either is refused (corrupt) or decodes; when
// it can be judged, the status edit changes the status token and nothing else, and the
// result decodes to the same location with the new status. Seeds include KVCM's own bytes.
func FuzzDecodeLocation(f *testing.F) {
	for _, s := range []string{
		`{"id":"a1b2c3d4","status":2,"type":4,"spec_size":1,"create_time":1716345600123456,"location_specs":[{"name":"tp0","uri":"file://nfs_01/tmp/nfs/inst0/tp0/499602d2?size=1024"}]}`,
		`{"id":"x","status":3}`,
		`{}`,
		` {"id":"x","future":{"a":[1e10,-0.5]},"status":4} `,
		`{"id":"x","status":4294967299,"type":260}`,
		`{"id":"x","u":1e400}`,
		"\xef\xbb\xbf{\"id\":\"x\"}",
		"{\"id\":\"x\"}\x00junk",
		`{"\u0069d":"x","st\u0061tus":2}`,
		`{"id":"x","status":2,"type":9,"location_specs":[],"migration_copy_guard":{"schema_version":1,"state":4,"operation_id":"o","source_location_id":"s"}}`,
		`{"id":"x","status":4,"migration_copy_guard":"bad","checksum":-1}`,
	} {
		f.Add("x", []byte(s), int64(StatusDeleting))
	}
	f.Fuzz(func(t *testing.T, id string, raw []byte, newStatus int64) {
		loc, err := DecodeLocation(id, raw)
		if err != nil {
			require.ErrorIs(t, err, ErrCorruptLocation)
			return
		}
		require.Equal(t, id, loc.ID)
		require.Equal(t, string(raw), string(loc.Raw))
		if loc.Err != nil {
			require.ErrorIs(t, loc.Err, ErrBadLocation)
			_, err := LocationWithStatus(raw, Status(newStatus))
			if loc.InnerID == id && id != "" {
				// Bad for a member, not for the id: the edit refuses it too.
				require.ErrorIs(t, err, ErrBadLocation)
			}
			return
		}
		out, err := LocationWithStatus(raw, Status(newStatus))
		if err != nil {
			require.ErrorIs(t, err, ErrBadLocation) // no status member
			return
		}
		again, err := DecodeLocation(id, out)
		require.NoError(t, err)
		if newStatus < math.MinInt32 || newStatus > math.MaxInt32 {
			require.ErrorIs(t, again.Err, ErrBadLocation)
			return
		}
		require.NoError(t, again.Err)
		want := loc
		want.Status, want.Raw, again.Raw = Status(newStatus), nil, nil
		require.Equal(t, want, again)
	})
}
