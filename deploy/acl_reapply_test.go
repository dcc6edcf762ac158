package deploy_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/deploy/privileges"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// TestACLFileReapply applies the Redis ACL file the way docs/operating.md says (an ACL
// SETUSER per line through redis-cli), turns the users on with their passwords as it says,
// saves them, then applies a changed file (another guard prefix) the same way: every user
// still signs in, with the new rules, and again after the server restarts from its saved
// aclfile. A file that turned its users off or dropped their passwords would fail here.
func TestACLFileReapply(t *testing.T) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("no redis-cli on PATH")
	}
	cmd := documentedCommand(t, "ACL SETUSER /")
	const adminPW = "redis-admin-pw"
	dir := t.TempDir()
	aclfile := filepath.Join(dir, "server.acl")
	require.NoError(t, os.WriteFile(aclfile, []byte("user default on >"+adminPW+" ~* &* +@all\n"), 0o600))
	r := testenv.StartRedis(t, testenv.WithRedisArgs("--aclfile", aclfile))
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: r.Addr(), Password: adminPW, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { _ = admin.Close() })

	apply := func(guardPrefix string) {
		t.Helper()
		file := filepath.Join(dir, "users.acl")
		require.NoError(t, os.WriteFile(file, []byte(privileges.ACLFile(privileges.Redis(guardPrefix), nil)), 0o600))
		host, port, ok := strings.Cut(r.Addr(), ":")
		require.True(t, ok)
		line := strings.NewReplacer("redis-cli", cli, "-h kvcm-redis", "-h "+host, "-p 6379", "-p "+port).Replace(cmd)
		sh := exec.Command("bash", "-o", "pipefail", "-c", line)
		sh.Dir = dir
		sh.Env = append(os.Environ(), "REDISCLI_AUTH="+adminPW)
		out, err := sh.CombinedOutput()
		require.NoError(t, err, "%s\n%s", line, out)
		require.Equal(t, strings.Repeat("OK\n", len(privileges.Redis(guardPrefix))), string(out), line)
	}
	passwords := map[string]string{}
	for _, u := range privileges.Redis(privileges.DefaultGuardPrefix) {
		passwords[privileges.DefaultUser(u.Stage)] = u.Stage + "-Pw9"
	}
	signIn := func(addr string) {
		t.Helper()
		for user, pw := range passwords {
			c := redis.NewClient(&redis.Options{Addr: addr, Username: user, Password: pw, Protocol: 2, DisableIdentity: true, MaxRetries: -1})
			require.NoError(t, c.Ping(ctx).Err(), "%s signs in and may PING", user)
			require.NoError(t, c.Close())
		}
	}

	apply(privileges.DefaultGuardPrefix)
	for user := range passwords {
		// New users are off and have no password until they get one.
		c := redis.NewClient(&redis.Options{Addr: r.Addr(), Username: user, Password: "", Protocol: 2, DisableIdentity: true, MaxRetries: -1})
		require.Error(t, c.Ping(ctx).Err(), "%s signs in before it has a password", user)
		require.NoError(t, c.Close())
		// As documented: on, with the password; then ACL SAVE.
		require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", user, "on", ">"+passwords[user]).Err())
	}
	require.NoError(t, admin.Do(ctx, "ACL", "SAVE").Err())
	signIn(r.Addr())

	// An upgrade changes the rules (a new guard prefix for the prober): apply the new file.
	apply("copy2:")
	require.NoError(t, admin.Do(ctx, "ACL", "SAVE").Err())
	signIn(r.Addr())
	prober, err := admin.Do(ctx, "ACL", "GETUSER", privileges.DefaultUser("prober")).Result()
	require.NoError(t, err)
	require.Contains(t, strings.Join(flatten(prober), " "), "copy2:*", "the prober has the new rules")
	require.NotContains(t, strings.Join(flatten(prober), " "), privileges.DefaultGuardPrefix+"*", "and not the old ones")

	// A restart loads the saved aclfile: passwords and rules as applied.
	again := testenv.StartRedis(t, testenv.WithRedisArgs("--aclfile", aclfile))
	signIn(again.Addr())
	t.Logf("%d users applied, signed in, re-applied with new rules and still signed in, also after a restart", len(passwords))
}

// flatten turns ACL GETUSER's nested reply into its strings.
func flatten(v any) []string {
	switch x := v.(type) {
	case []any:
		var out []string
		for _, e := range x {
			out = append(out, flatten(e)...)
		}
		return out
	case map[any]any:
		var out []string
		for k, e := range x {
			out = append(out, flatten(k)...)
			out = append(out, flatten(e)...)
		}
		return out
	case string:
		return []string{x}
	case int64:
		return []string{strconv.FormatInt(x, 10)}
	}
	return nil
}
