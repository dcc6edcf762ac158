package steptest_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/tools/steptest"
)

type action interface{ isAction() }

type actA struct{ n int }
type actB struct{}

func (actA) isAction() {}
func (actB) isAction() {}

func TestSelect(t *testing.T) {
	acts := []action{actA{1}, actB{}, actA{2}}
	require.Equal(t, []actA{{1}, {2}}, steptest.OfType[actA](acts))
	require.Empty(t, steptest.OfType[actA]([]action{actB{}}))
	require.Equal(t, actB{}, steptest.Only[actB](t, acts))
	require.Equal(t, actA{2}, steptest.Last[actA](t, acts))
	steptest.None[actA](t, []action{actB{}})
}

func TestSelectFails(t *testing.T) {
	acts := []action{actA{1}, actA{2}}
	for name, check := range map[string]func(t testing.TB){
		"only of two":  func(t testing.TB) { steptest.Only[actA](t, acts) },
		"only of none": func(t testing.TB) { steptest.Only[actB](t, acts) },
		"none of two":  func(t testing.TB) { steptest.None[actA](t, acts) },
		"last of none": func(t testing.TB) { steptest.Last[actB](t, acts) },
	} {
		t.Run(name, func(t *testing.T) {
			r := &recorder{TB: t}
			func() {
				defer func() { _ = recover() }() // require stops a failing test with FailNow
				check(r)
			}()
			require.True(t, r.failed, "no failure")
		})
	}
}

// recorder records a failure instead of failing the test.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Errorf(string, ...any) { r.failed = true }
func (r *recorder) FailNow()              { r.failed = true; panic("FailNow") }
