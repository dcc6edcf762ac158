package redismeta_test

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/tools/conformance/metatest"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// useStore opens a store for uri (with base options) and runs one scan and one read.
func useStore(t *testing.T, base redismeta.ConnOptions, uri string) error {
	t.Helper()
	conn, err := base.ApplyURI(uri)
	if err != nil {
		return err
	}
	st, err := redismeta.OpenStore(testenv.Context(t), conn, redismeta.StoreOptions{})
	if err != nil {
		return err
	}
	defer st.Close()
	if _, err := metatest.ScanInstance(testenv.Context(t), st, "i", 0, 10); err != nil {
		return err
	}
	_, _, err = metatest.GetURI(testenv.Context(t), st, "i", 1)
	return err
}

// TestKVCMAuth: a KVCM deployment protects Redis with requirepass set to its URI's userinfo;
// kvcm-gc must get in with the same URI, and fail clearly, without echoing secrets, otherwise.
func TestKVCMAuth(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testenv.Context(t)
	require.NoError(t, srv.Client().HSet(ctx, kvcm.BlockKey("i", 1), "__uri__", "v", "__lru_time__", "1").Err())
	srv.RequirePass(t, "kvcm-user:Pw0rd-42")

	tests := []struct {
		name    string
		uri     string
		wantErr []string // substrings of the error; nil means success
	}{
		{"userinfo as the password", "redis://kvcm-user:Pw0rd-42@" + srv.Addr() + "/", nil},
		{"wrong password", "redis://kvcm-user:Wr0ngSecret@" + srv.Addr(), []string{"authenticate", srv.Addr(), "WRONGPASS"}},
		{"user alone is not the password", "redis://Pw0rd-42@" + srv.Addr(), []string{"authenticate", "WRONGPASS"}},
		{"no userinfo", "redis://" + srv.Addr(), []string{"NOAUTH"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := useStore(t, redismeta.ConnOptions{}, tc.uri)
			if tc.wantErr == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, s := range tc.wantErr {
				require.ErrorContains(t, err, s)
			}
			for _, secret := range []string{"Wr0ngSecret", "Pw0rd-42", "kvcm-user"} {
				require.NotContains(t, err.Error(), secret)
			}
		})
	}
}

// TestKVCMAuthOnlyAfterNOAUTH: KVCM sends AUTH only when PING says NOAUTH; against an open
// server the userinfo is never sent.
func TestKVCMAuthOnlyAfterNOAUTH(t *testing.T) {
	srv := testenv.StartRedis(t)
	before := srv.CommandStats(t)["auth"]
	require.NoError(t, useStore(t, redismeta.ConnOptions{}, "redis://u:p@"+srv.Addr()))
	require.Equal(t, before, srv.CommandStats(t)["auth"], "AUTH sent to a server that needs none")

	srv.RequirePass(t, "u:p")
	require.NoError(t, useStore(t, redismeta.ConnOptions{}, "redis://u:p@"+srv.Addr()))
	require.Greater(t, srv.CommandStats(t)["auth"], before, "AUTH not sent after NOAUTH")
}

// TestACLAuth: kvcm-gc's own connections use an ACL user and password, given as options and
// combined with a credential-free URI.
func TestACLAuth(t *testing.T) {
	srv := testenv.StartRedis(t)
	srv.AddUser(t, "gc-scan", "Sc4nPass", scannerRules...)
	srv.AddUser(t, "gc-off", "0ffPass", "~*", "+@all")
	require.NoError(t, srv.Client().Do(testenv.Context(t), "ACL", "SETUSER", "gc-off", "off").Err())
	// With the default user disabled, nothing gets in without credentials. (The admin client's
	// open connection stays authenticated; it is not used afterwards.)
	require.NoError(t, srv.Client().Do(testenv.Context(t), "ACL", "SETUSER", "default", "off").Err())

	tests := []struct {
		name    string
		base    redismeta.ConnOptions
		wantErr string
	}{
		{"read-only user", redismeta.ConnOptions{Username: "gc-scan", Password: "Sc4nPass"}, ""},
		{"wrong password", redismeta.ConnOptions{Username: "gc-scan", Password: "Wr0ngSecret"}, "WRONGPASS"},
		{"disabled user", redismeta.ConnOptions{Username: "gc-off", Password: "0ffPass"}, "WRONGPASS"},
		{"no credentials", redismeta.ConnOptions{}, "NOAUTH"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := useStore(t, tc.base, "redis://"+srv.Addr())
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
			for _, secret := range []string{"Wr0ngSecret", "0ffPass", "Sc4nPass"} {
				require.NotContains(t, err.Error(), secret)
			}
		})
	}
}

// TestKVCMAuthWithDB: with a "db" parameter the database is selected after the AUTH a
// protected server needs, and the scan sees that database only.
func TestKVCMAuthWithDB(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testenv.Context(t)
	require.NoError(t, srv.Client().HSet(ctx, kvcm.BlockKey("i", 0), "__uri__", "db0").Err())
	db2 := redis.NewClient(&redis.Options{Addr: srv.Addr(), DB: 2, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { require.NoError(t, db2.Close()) })
	require.NoError(t, db2.HSet(ctx, kvcm.BlockKey("i", 2), "L#a", "db2").Err())
	// A legacy key in a database other than 0 is nobody's: a KVCM of that layout ignores
	// db= and keeps its blocks in DB 0.
	require.NoError(t, db2.HSet(ctx, kvcm.BlockKey("i", 3), "__uri__", "copy").Err())
	srv.RequirePass(t, "u:pw")

	for _, uri := range []string{"redis://u:pw@" + srv.Addr() + "?db=2", "redis://" + srv.Addr() + "?db=2"} {
		base := redismeta.ConnOptions{}
		if !strings.Contains(uri, "@") {
			base.Password = "u:pw" // the same server through go-redis's native auth
		}
		conn, err := base.ApplyURI(uri)
		require.NoError(t, err)
		st, err := redismeta.OpenStore(ctx, conn, redismeta.StoreOptions{})
		require.NoError(t, err)
		p, err := metatest.ScanInstance(ctx, st, "i", 0, 10)
		require.NoError(t, err)
		require.Len(t, p.Entries, 1, uri)
		require.Equal(t, 1, p.WrongDB, uri)
		v, _ := p.Entries[0].Location("a")
		require.Equal(t, "db2", string(v))
		w := func(exp, next string) []meta.CondWrite {
			return []meta.CondWrite{{BlockKey: 2, Layout: kvcm.LayoutLocation, Location: "a", Expected: []byte(exp), Next: []byte(next)}}
		}
		for _, step := range [][2]string{{"db2", "db2'"}, {"db2'", "db2"}} {
			errs, err := st.CASMany(ctx, "i", w(step[0], step[1]))
			require.NoError(t, err)
			require.NoError(t, errs[0])
		}
		require.ErrorIs(t, metatest.CAS(ctx, st, "i", 3, []byte("copy"), []byte("x")), meta.ErrLayout)
		r, err := st.ReadBlocks(ctx, "i", []int64{3})
		require.NoError(t, err)
		require.ErrorIs(t, r[0].Err, meta.ErrLayout)
		require.NoError(t, st.Close())
	}
}

// TestRefusedConnectionFailsEveryCall: when the server refuses the connection (a wrong
// password), go-redis leaves a pipeline's commands without an error or a value. Every call
// must fail rather than read that as absent blocks: a deleter that took it for "gone" would
// acknowledge, and so lose, its request.
func TestRefusedConnectionFailsEveryCall(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testenv.Context(t)
	require.NoError(t, srv.Client().HSet(ctx, kvcm.BlockKey("i", 1), "__uri__", "v").Err())
	srv.RequirePass(t, "right")
	conn, err := redismeta.ParseURI("redis://wrong@" + srv.Addr())
	require.NoError(t, err)
	st, err := redismeta.OpenStore(ctx, conn, redismeta.StoreOptions{})
	require.NoError(t, err)
	defer st.Close()

	_, err = st.ReadBlocks(ctx, "i", []int64{1, 2})
	require.ErrorContains(t, err, "WRONGPASS")
	_, err = st.CASMany(ctx, "i", []meta.CondWrite{{Layout: kvcm.LayoutLegacy, BlockKey: 1, Expected: []byte("v"), Next: []byte("w")}})
	require.ErrorContains(t, err, "WRONGPASS")
	_, err = st.CADMany(ctx, "i", []meta.CondWrite{{Layout: kvcm.LayoutLegacy, BlockKey: 1, Expected: []byte("v")}})
	require.ErrorContains(t, err, "WRONGPASS")
	_, err = st.ScanStore(ctx, 0, 10, func(string) bool { return true })
	require.ErrorContains(t, err, "WRONGPASS")
	_, err = metatest.ScanInstance(ctx, st, "i", 0, 10)
	require.ErrorContains(t, err, "WRONGPASS")
	_, _, err = metatest.GetURI(ctx, st, "i", 1)
	require.ErrorContains(t, err, "WRONGPASS")
}
