package deploy_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/deploy/privileges"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// operatingFile is the operator's guide, whose commands the tests run.
const operatingFile = "../docs/operating.md"

// documentedCommand returns the shell command of the fenced block of docs/operating.md that
// contains want, its continuation lines joined.
func documentedCommand(t *testing.T, want string) string {
	t.Helper()
	data, err := os.ReadFile(operatingFile)
	require.NoError(t, err)
	var blocks []string
	var block []string
	in := false
	for _, line := range strings.Split(string(data), "\n") {
		switch {
		case strings.HasPrefix(line, "```") && !in:
			in, block = true, nil
		case strings.HasPrefix(line, "```"):
			in = false
			blocks = append(blocks, strings.Join(block, "\n"))
		case in:
			block = append(block, line)
		}
	}
	for _, b := range blocks {
		if strings.Contains(b, want) {
			return strings.TrimSpace(strings.ReplaceAll(b, "\\\n", ""))
		}
	}
	t.Fatalf("%s has no command with %q", operatingFile, want)
	return ""
}

// yqs are the yq programs the documented commands are run with: the one the tests are given
// (YQ, .tools/bin, PATH), and another on PATH (the jq-style yq some distributions ship, say).
func yqs(t *testing.T) []string {
	t.Helper()
	out := []string{tool(t, "yq")}
	if p, err := exec.LookPath("yq"); err == nil && !slices.Contains(out, p) {
		out = append(out, p)
	}
	return out
}

// TestDocumentedACLFile renders the Redis ACL file the way docs/operating.md says, with every
// yq at hand, and loads it into a real redis-server both ways the guide gives: as the server's
// aclfile, and added to an existing aclfile followed by ACL LOAD. Every kvcm-gc user is then
// defined, with the rules deploy/privileges gives it.
func TestDocumentedACLFile(t *testing.T) {
	helm := tool(t, "helm")
	cmd := documentedCommand(t, `.data["users.acl"]`)
	chart, err := filepath.Abs(chartDir)
	require.NoError(t, err)
	want := privileges.ACLFile(privileges.Redis(privileges.DefaultGuardPrefix), nil)
	for _, yq := range yqs(t) {
		t.Run(yq, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, "my-values.yaml"),
				[]byte("kvcm:\n  registryURI: redis://kvcm-redis:6379?cluster_name=prod\n"), 0o644))
			line := strings.NewReplacer("helm template", helm+" template", "| yq", "| "+yq,
				"deploy/helm/kvcm-gc", chart).Replace(cmd)
			sh := exec.Command("bash", "-o", "pipefail", "-c", line)
			sh.Dir = dir
			out, err := sh.CombinedOutput()
			require.NoError(t, err, "%s\n%s", line, out)
			acl, err := os.ReadFile(filepath.Join(dir, "users.acl"))
			require.NoError(t, err)
			require.Equal(t, strings.TrimSpace(want), strings.TrimSpace(string(acl)), "the file is what deploy/privileges renders")

			// As the server's aclfile; then ACL LOAD of the same file.
			r := testenv.StartRedis(t, testenv.WithRedisArgs("--aclfile", filepath.Join(dir, "users.acl")))
			ctx := context.Background()
			checkUsers(t, r, want)
			require.NoError(t, r.Client().Do(ctx, "ACL", "LOAD").Err())
			checkUsers(t, r, want)

			// Added to a server's existing aclfile, then ACL LOAD.
			existing := filepath.Join(dir, "server.acl")
			require.NoError(t, os.WriteFile(existing, []byte("user default on nopass ~* &* +@all\n"), 0o644))
			r2 := testenv.StartRedis(t, testenv.WithRedisArgs("--aclfile", existing))
			require.NoError(t, os.WriteFile(existing, append([]byte("user default on nopass ~* &* +@all\n"), acl...), 0o644))
			require.NoError(t, r2.Client().Do(ctx, "ACL", "LOAD").Err())
			checkUsers(t, r2, want)
		})
	}
}

// checkUsers: the server has the default user and the users of the ACL file, each with the
// file's rules as Redis states them back.
func checkUsers(t *testing.T, r *testenv.Redis, file string) {
	t.Helper()
	ctx := context.Background()
	listed, err := r.Client().Do(ctx, "ACL", "LIST").StringSlice()
	require.NoError(t, err)
	have := map[string][]string{} // user -> its +commands, as the server lists them
	for _, line := range listed {
		f := strings.Fields(line)
		have[f[1]] = commands(f[2:])
	}
	want := map[string][]string{"default": {"+@all"}}
	for _, line := range strings.Split(strings.TrimSpace(file), "\n") {
		f := strings.Fields(line)
		require.Equal(t, "user", f[0], line)
		want[f[1]] = commands(f[2:])
	}
	require.Equal(t, want, have)
}

// commands are the sorted +command rules of an ACL rule list.
func commands(rules []string) []string {
	var out []string
	for _, r := range rules {
		if strings.HasPrefix(r, "+") {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}

// TestSecurityDocCommands: the table of Redis ACL users in docs/security.md lists each user's
// commands exactly as deploy/privileges grants them.
func TestSecurityDocCommands(t *testing.T) {
	data, err := os.ReadFile("../docs/security.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(data), "\n## Redis ACL users")
	require.True(t, ok, "docs/security.md has no Redis ACL users section")
	section, _, _ = strings.Cut(section, "\n## ")
	rows := map[string][]string{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, " | ")
		if !strings.HasPrefix(line, "| `kvcm-gc-") || len(cells) < 3 {
			continue
		}
		user := strings.Trim(strings.TrimPrefix(cells[0], "| "), "`")
		var cmds []string
		for _, c := range strings.Fields(strings.Trim(cells[1], "`")) {
			cmds = append(cmds, strings.ToLower(strings.ReplaceAll(c, `\|`, "|")))
		}
		slices.Sort(cmds)
		rows[user] = cmds
	}
	users := privileges.Redis(privileges.DefaultGuardPrefix)
	require.Len(t, rows, len(users), "a row per Redis user")
	for _, u := range users {
		want := slices.Sorted(slices.Values(u.Commands))
		user := "kvcm-gc-" + u.Stage
		require.Equal(t, want, rows[user], "docs/security.md: the commands of %s", user)
	}
}
