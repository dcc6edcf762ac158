// Package guardtest is the conformance suite of guard.Guard implementations that keep records
// of copy targets: which records protect which locations, and of which instance only.
package guardtest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/guard"
)

// Harness builds a guard with an empty record store per case.
type Harness interface {
	NewGuard(t *testing.T) (guard.Guard, Records)
}

// Records writes copy-target records the way a migrator would, directly in the store, not
// through the guard under test.
type Records interface {
	// ProtectBlock records every location of the block as a copy target.
	ProtectBlock(t *testing.T, instanceID string, blockKey int64)
	// ProtectLocation records one location of the block as a copy target.
	ProtectLocation(t *testing.T, instanceID string, blockKey int64, locationID string)
	// Clear removes every record of the instance (the migration finished).
	Clear(t *testing.T, instanceID string)
}

type probe struct {
	instance string
	block    int64
	location string
	want     bool
}

func check(t *testing.T, g guard.Guard, probes []probe) {
	t.Helper()
	for _, p := range probes {
		got, err := g.IsCopyTarget(context.Background(), p.instance, p.block, p.location)
		require.NoError(t, err)
		require.Equal(t, p.want, got, "instance %q block %d location %q", p.instance, p.block, p.location)
	}
}

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	const minInt64 = -1 << 63
	cases := []struct {
		name   string
		record func(t *testing.T, r Records)
		probes []probe
	}{
		{"nothing recorded", func(*testing.T, Records) {}, []probe{
			{"inst_a", 1, "q0x7m2ab", false},
			{"inst_a", 0, "", false},
		}},
		{"block record protects every location of that block only", func(t *testing.T, r Records) {
			r.ProtectBlock(t, "inst_a", -7262535415567954716)
		}, []probe{
			{"inst_a", -7262535415567954716, "q0x7m2ab", true},
			{"inst_a", -7262535415567954716, "k3j9x0cd", true},
			{"inst_a", -7262535415567954716, "", true},
			{"inst_a", 7262535415567954716, "q0x7m2ab", false},
			{"inst_a", -726253541556795471, "q0x7m2ab", false},
		}},
		{"location record protects that location only", func(t *testing.T, r Records) {
			r.ProtectLocation(t, "inst_a", 42, "q0x7m2ab")
		}, []probe{
			{"inst_a", 42, "q0x7m2ab", true},
			{"inst_a", 42, "k3j9x0cd", false},
			{"inst_a", 42, "q0x7m2a", false},
			{"inst_a", 4, "q0x7m2ab", false},
			{"inst_a", 420, "q0x7m2ab", false},
		}},
		{"instances are isolated", func(t *testing.T, r Records) {
			r.ProtectBlock(t, "inst_a", 7)
			r.ProtectLocation(t, "inst_a", 8, "q0x7m2ab")
		}, []probe{
			{"inst_a", 7, "k3j9x0cd", true},
			{"inst_a", 8, "q0x7m2ab", true},
			{"inst_b", 7, "k3j9x0cd", false},
			{"inst_b", 8, "q0x7m2ab", false},
			{"inst_", 7, "k3j9x0cd", false},
			{"inst_a7", 8, "q0x7m2ab", false},
			{"", 7, "k3j9x0cd", false},
		}},
		{"odd ids and extreme keys", func(t *testing.T, r Records) {
			r.ProtectLocation(t, "inst:a*?[x]", minInt64, "a:b")
			r.ProtectBlock(t, "", 0)
		}, []probe{
			{"inst:a*?[x]", minInt64, "a:b", true},
			{"inst:a*?[x]", minInt64, "a", false},
			{"inst:a*?[x]", minInt64 + 1, "a:b", false},
			{"", 0, "x", true},
			{"inst:a*?[x]", 0, "x", false},
		}},
		{"a cleared record protects nothing", func(t *testing.T, r Records) {
			r.ProtectBlock(t, "inst_a", 1)
			r.ProtectLocation(t, "inst_a", 2, "q0x7m2ab")
			r.Clear(t, "inst_a")
		}, []probe{
			{"inst_a", 1, "k3j9x0cd", false},
			{"inst_a", 2, "q0x7m2ab", false},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, r := h.NewGuard(t)
			c.record(t, r)
			check(t, g, c.probes)
		})
	}
}
