package redismeta

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPoolStoreOptionsCarryTheDB: every store is opened knowing the database its connection
// selects, so a reader of the legacy layout (which KVCM keeps in DB 0 only) can tell.
func TestPoolStoreOptionsCarryTheDB(t *testing.T) {
	p := NewPool(PoolOptions{Store: StoreOptions{DryRun: true}})
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	p.Learn("h:1?db=3", KVCMURIPrefix+"redis://h:1/?db=3")
	p.Learn("h:1", KVCMURIPrefix+"redis://h:1/?db=-3")
	for name, db := range map[string]int{"h:1?db=3": 3, "h:1": 0, "h:2?db=5": 5, "h:2": 0} {
		conn, err := p.ConnOptions(name)
		require.NoError(t, err, name)
		require.Equal(t, name, conn.Name())
		o := p.storeOptions(conn)
		require.Equal(t, db, o.DB, name)
		require.True(t, o.DryRun, name)
	}
}
