package seed

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// The serialize cases of kvcm/testdata were produced by KVCM's own serializer (compiled from
// its source, see the README there): the bytes seed writes must be those bytes.

type fixture struct {
	Name      string          `json:"name"`
	Kind      string          `json:"kind"`
	Fields    json.RawMessage `json:"fields"`
	FieldName string          `json:"field_name"`
	KVCMBytes *string         `json:"kvcm_bytes"`
	KVCMHex   string          `json:"kvcm_bytes_hex"`
}

func (f fixture) kvcm(t *testing.T) []byte {
	t.Helper()
	if f.KVCMHex != "" {
		b, err := hex.DecodeString(f.KVCMHex)
		require.NoError(t, err)
		return b
	}
	require.NotNil(t, f.KVCMBytes, f.Name)
	return []byte(*f.KVCMBytes)
}

// fixtureString is a string of a fixture: plain, or {"hex": "…"} when not valid UTF-8.
type fixtureString string

func (s *fixtureString) UnmarshalJSON(b []byte) error {
	var plain string
	if err := json.Unmarshal(b, &plain); err == nil {
		*s = fixtureString(plain)
		return nil
	}
	var h struct {
		Hex string `json:"hex"`
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return err
	}
	raw, err := hex.DecodeString(h.Hex)
	*s = fixtureString(raw)
	return err
}

type fixtureLocation struct {
	Key        fixtureString  `json:"key"` // legacy map key
	ID         fixtureString  `json:"id"`
	Status     int32          `json:"status"`
	Type       uint8          `json:"type"`
	SpecSize   uint64         `json:"spec_size"`
	CreateTime *int64         `json:"create_time"`
	Specs      []fixtureSpecs `json:"location_specs"`
}

type fixtureSpecs struct {
	Name fixtureString `json:"name"`
	URI  fixtureString `json:"uri"`
}

func (f fixtureLocation) location() locationJSON {
	l := locationJSON{ID: string(f.ID), Status: f.Status, Type: f.Type, SpecSize: f.SpecSize, NoCreateTime: f.CreateTime == nil}
	if f.CreateTime != nil {
		l.CreateTime = *f.CreateTime
	}
	for _, s := range f.Specs {
		l.Specs = append(l.Specs, kvcm.Spec{Name: string(s.Name), URI: string(s.URI)})
	}
	return l
}

func readFixtures(t *testing.T, layout string) []fixture {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "kvcm", "testdata", "kvcm", layout, "cases.jsonl"))
	require.NoError(t, err)
	defer f.Close()
	var out []fixture
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var c fixture
		require.NoError(t, json.Unmarshal(sc.Bytes(), &c), sc.Text())
		if c.Kind == "serialize" {
			out = append(out, c)
		}
	}
	require.NoError(t, sc.Err())
	return out
}

// TestLocationJSONIsKVCMBytes: every location-layout serialize case, written by seed's writer
// from the fields KVCM was given, is byte for byte what KVCM wrote, under the field name
// KVCM's SerializeToFieldMap gave it.
func TestLocationJSONIsKVCMBytes(t *testing.T) {
	cases := readFixtures(t, "location")
	require.GreaterOrEqual(t, len(cases), 20)
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			var f fixtureLocation
			d := json.NewDecoder(bytes.NewReader(c.Fields))
			require.NoError(t, d.Decode(&f))
			require.NotNil(t, f.CreateTime, "the location layout always has create_time")
			l := f.location()
			require.Equal(t, c.kvcm(t), l.bytes())
			require.Equal(t, c.FieldName, kvcm.LocationField(l.ID))
		})
	}
}

// TestLegacyMapIsKVCMBytes: the legacy __uri__ writer (locations without create_time, in the
// order KVCM's map gave them) is byte for byte what KVCM f6aa2b2 wrote.
func TestLegacyMapIsKVCMBytes(t *testing.T) {
	cases := readFixtures(t, "legacy")
	require.GreaterOrEqual(t, len(cases), 10)
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			var fs []fixtureLocation
			require.NoError(t, json.Unmarshal(c.Fields, &fs))
			want := c.kvcm(t)
			// KVCM writes its unordered_map's order: take the order of its output.
			blk, err := kvcm.DecodeBlock(want)
			require.NoError(t, err)
			byKey := map[string]fixtureLocation{}
			for _, f := range fs {
				require.Nil(t, f.CreateTime, "f6aa2b2 has no create_time")
				byKey[string(f.Key)] = f
			}
			var keys []string
			var locs []locationJSON
			for _, l := range blk.Locations {
				f, ok := byKey[l.ID]
				require.True(t, ok, l.ID)
				keys = append(keys, l.ID)
				locs = append(locs, f.location())
			}
			require.Len(t, locs, len(fs))
			require.Equal(t, want, appendLegacyMap(nil, keys, locs))
		})
	}
}

// FuzzLocationJSON: whatever the strings and numbers, the writer's output is one location
// that kvcm-gc's decoder (held to KVCM's reading) reads back as written.
func FuzzLocationJSON(f *testing.F) {
	f.Add("a1b2c3d4", "tp0", "file://nfs_01/p/\u0001\"\\&<>é\x7f?size=1", int32(2), uint8(4), int64(1716345600123456))
	f.Add("x", "", "", int32(-1), uint8(255), int64(-9223372036854775808))
	f.Fuzz(func(t *testing.T, id, name, uri string, status int32, typ uint8, ct int64) {
		if !utf8.ValidString(id) || !utf8.ValidString(name) || !utf8.ValidString(uri) {
			t.Skip("KVCM writes invalid UTF-8 raw; kvcm-gc's decoder need not read it")
		}
		l := locationJSON{ID: id, Status: status, Type: typ, SpecSize: 1, CreateTime: ct, Specs: []kvcm.Spec{{Name: name, URI: uri}}}
		raw := l.bytes()
		require.True(t, json.Valid(raw), "%q", raw)
		loc, err := kvcm.DecodeLocation(id, raw)
		require.NoError(t, err, "%q", raw)
		require.Equal(t, raw, loc.Raw)
		require.Equal(t, id, loc.InnerID)
		require.Equal(t, kvcm.Status(status), loc.Status)
		require.Equal(t, kvcm.StorageType(typ), loc.Type)
		require.Equal(t, ct, loc.CreateTimeUs)
		require.True(t, loc.HasCreateTime)
		if loc.Err == nil {
			require.Equal(t, l.Specs, loc.Specs)
		}
		// encoding/json reads the same strings (it differs only in how it writes them).
		var std struct {
			ID    string `json:"id"`
			Specs []struct {
				Name, URI string
			} `json:"location_specs"`
		}
		require.NoError(t, json.Unmarshal(raw, &std))
		require.Equal(t, id, std.ID)
		require.Equal(t, name, std.Specs[0].Name)
		require.Equal(t, uri, std.Specs[0].URI)
	})
}
