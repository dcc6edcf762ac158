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

func TestTypes(t *testing.T) {
	r := &recorder{TB: t}
	Types(r, "testdata/ex", "isAct", "all")
	require.Empty(t, r.errs)
	Types(r, "testdata/ex", "isAct", "some")
	require.Equal(t, []string{"some has no case for actB, actC (types with isAct)"}, r.errs)
	r.errs = nil
	Types(r, "testdata/ex", "isNothing", "all")
	require.Equal(t, []string{"no type has the marker method isNothing"}, r.errs)
}

func TestEnum(t *testing.T) {
	r := &recorder{TB: t}
	Enum(r, "testdata/ex", "state", "allStates")
	require.Empty(t, r.errs)
	Enum(r, "testdata/ex", "state", "someStates")
	require.Equal(t, []string{"someStates has no case for stTwo, stThree (constants of state)"}, r.errs)
}
