package sealed

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// recorder keeps what a check reports instead of failing the test running it.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper()                      {}
func (r *recorder) Errorf(f string, args ...any) { r.errs = append(r.errs, fmt.Sprintf(f, args...)) }
func (r *recorder) Fatalf(f string, args ...any) { r.errs = append(r.errs, fmt.Sprintf(f, args...)) }
func (r *recorder) Fatal(args ...any)            { r.errs = append(r.errs, fmt.Sprint(args...)) }

func TestChecks(t *testing.T) {
	for _, tt := range []struct {
		name  string
		check func(t testing.TB)
		want  []string
	}{
		{"every type handled", func(t testing.TB) { Types(t, "testdata/ex", "isAct", "all") }, nil},
		{"types missing", func(t testing.TB) { Types(t, "testdata/ex", "isAct", "some") },
			[]string{"some has no case for actB, actC (types with isAct)"}},
		{"no type with the marker", func(t testing.TB) { Types(t, "testdata/ex", "isNothing", "all") },
			[]string{"no type has the marker method isNothing"}},
		{"every constant handled", func(t testing.TB) { Enum(t, "testdata/ex", "state", "allStates") }, nil},
		{"constants missing, in declaration order", func(t testing.TB) { Enum(t, "testdata/ex", "state", "someStates") },
			[]string{"someStates has no case for stTwo, stThree (constants of state)"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := &recorder{TB: t}
			tt.check(r)
			require.Equal(t, tt.want, r.errs)
		})
	}
}
