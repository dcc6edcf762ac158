package subjects_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// TestSealedDeleteRequest: a sealed request decodes to the request, is smaller than its JSON
// when there is something to gain, and a sealed message that does not decompress is poison.
func TestSealedDeleteRequest(t *testing.T) {
	for _, n := range []int{1, 256} {
		req := benchDeleteRequest(n)
		plain, err := subjects.Encode(req)
		require.NoError(t, err)
		sealed, err := subjects.EncodeDeleteRequest(req)
		require.NoError(t, err)
		if n == 256 {
			require.True(t, subjects.IsSealed(sealed))
			require.Less(t, len(sealed)*3, len(plain), "%d -> %d bytes", len(plain), len(sealed))
		}
		want, err := subjects.DecodeDeleteRequest(plain)
		require.NoError(t, err)
		got, err := subjects.DecodeDeleteRequest(sealed)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	_, err := subjects.DecodeDeleteRequest([]byte("KVZ\x01\xff\xff\xff\xff"))
	require.ErrorIs(t, err, subjects.ErrPoison)
	_, err = subjects.DecodeDeleteRequest([]byte("KVZ\x01"))
	require.ErrorIs(t, err, subjects.ErrPoison)
}
