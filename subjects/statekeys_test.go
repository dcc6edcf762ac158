package subjects

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// validKey is the server's rule for a bucket key; no token may be empty.
var validKey = regexp.MustCompile(`^[-/_=\.a-zA-Z0-9]+$`)

func TestStateKeys(t *testing.T) {
	require.Equal(t, "store.10.0.0.7=3A6379", StoreLeaseKey("10.0.0.7:6379"))
	require.Equal(t, "checkpoint.redis-a=3A6379", CheckpointKey("redis-a:6379"))
	require.Equal(t, "member.host=2F42", MemberKey("host/42"))
	for _, s := range []string{"", "a", ".", "..", "a..b", ".a", "a.", "h:1?db=2", "实例", "a=3A", "x y*>", "127.0.0.1:6379"} {
		for _, k := range []string{StoreLeaseKey(s), CheckpointKey(s), MemberKey(s)} {
			require.Regexp(t, validKey, k)
			for tok := range strings.SplitSeq(k, ".") {
				require.NotEmpty(t, tok, "empty token in %q", k)
			}
		}
		got, err := StoreOfLeaseKey(StoreLeaseKey(s))
		require.NoError(t, err)
		require.Equal(t, s, got)
		got, err = StoreOfCheckpointKey(CheckpointKey(s))
		require.NoError(t, err)
		require.Equal(t, s, got)
		got, err = HolderOfMemberKey(MemberKey(s))
		require.NoError(t, err)
		require.Equal(t, s, got)
	}
	require.NotEqual(t, EncodeKeyPart("a:b"), EncodeKeyPart("a=3Ab"))
	for _, bad := range []string{"store.", "store.=4", "store.=zz", "store.a b", "checkpoint.x"} {
		_, err := StoreOfLeaseKey(bad)
		require.ErrorIs(t, err, ErrBadKey, bad)
	}
}
