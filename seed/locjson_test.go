package seed

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

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
	f, err := os.Open(filepath.Join("..", "kvcm", "testdata", "kvcm", layout, "cases.jsonl"))
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
