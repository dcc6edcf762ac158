package privileges_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/deploy/privileges"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// template is the JSON of Template.
type template struct {
	Redis []struct{ Stage, User, Role, Rules string }
	NATS  []struct {
		Stage, User, Role  string
		Publish, Subscribe []string
	}
}

// TestTemplateRendersTheUsers fills Template's placeholders as the chart does and gets back
// exactly Redis and NATS for those names, every stage and the admin included.
func TestTemplateRendersTheUsers(t *testing.T) {
	data, err := privileges.Template()
	require.NoError(t, err)
	var tpl template
	require.NoError(t, json.Unmarshal(data, &tpl))
	require.NotContains(t, string(data), "zz", "a stand-in was left unreplaced")

	for _, c := range []struct{ prefix, cluster, guard string }{
		{"kvcmgc", "kvcm-prod", privileges.DefaultGuardPrefix},
		{"gc", "c1", "copy:"},
	} {
		n, err := subjects.NewNames(c.prefix, c.cluster)
		require.NoError(t, err)
		objects, ok := strings.CutSuffix(n.BatchesStream(), "_BATCHES")
		require.True(t, ok)
		r := strings.NewReplacer(privileges.PlaceholderPrefix, c.prefix, privileges.PlaceholderCluster, kvcm.EncodeToken(c.cluster),
			privileges.PlaceholderObjects, objects, privileges.PlaceholderGuardPrefix, c.guard)

		redis := privileges.Redis(c.guard)
		require.Len(t, tpl.Redis, len(redis))
		for i, u := range redis {
			require.Equal(t, u.Stage, tpl.Redis[i].Stage)
			require.Equal(t, privileges.DefaultUser(u.Stage), tpl.Redis[i].User)
			require.Equal(t, u.Rules(), r.Replace(tpl.Redis[i].Rules), u.Stage)
		}
		nats := privileges.NATS(n)
		require.Len(t, tpl.NATS, len(nats))
		for i, u := range nats {
			require.Equal(t, u.Stage, tpl.NATS[i].Stage)
			for j, s := range tpl.NATS[i].Publish {
				require.Equal(t, u.Publish[j], r.Replace(s), "%s publish", u.Stage)
			}
			require.Len(t, tpl.NATS[i].Publish, len(u.Publish))
			for j, s := range tpl.NATS[i].Subscribe {
				require.Equal(t, u.Subscribe[j], r.Replace(s), "%s subscribe", u.Stage)
			}
			require.Len(t, tpl.NATS[i].Subscribe, len(u.Subscribe))
		}
	}
}

// TestEveryStageHasItsOwnUsers: one Redis user and one NATS user per stage and for the
// admin, no two alike; no stage but the admin manages JetStream, and only the deleter writes
// in Redis.
func TestEveryStageHasItsOwnUsers(t *testing.T) {
	n, err := subjects.NewNames("kvcmgc", "c1")
	require.NoError(t, err)
	var stages []string
	rules := map[string]bool{}
	for _, u := range privileges.Redis(privileges.DefaultGuardPrefix) {
		stages = append(stages, u.Stage)
		require.False(t, rules[u.Rules()], "%s shares its rules", u.Stage)
		rules[u.Rules()] = true
		if u.Stage != "deleter" {
			require.Empty(t, u.WriteKeys, "%s writes", u.Stage)
			for _, c := range u.Commands {
				require.NotContains(t, []string{"hset", "hdel", "del", "eval", "evalsha", "script|load"}, c, u.Stage)
			}
		}
	}
	require.Equal(t, append([]string{privileges.StageAdmin}, privileges.Stages...), stages, "the admin has a Redis user of its own")
	admin := privileges.Redis(privileges.DefaultGuardPrefix)[0]
	require.NotContains(t, admin.Commands, "scan", "the admin's commands walk nothing")
	stages = nil
	for _, u := range privileges.NATS(n) {
		stages = append(stages, u.Stage)
		if u.Stage == privileges.StageAdmin {
			continue
		}
		for _, s := range u.Publish {
			require.NotEqual(t, ">", s, u.Stage)
			for _, managing := range []string{"STREAM.CREATE", "STREAM.UPDATE", "STREAM.DELETE", "STREAM.PURGE", "CONSUMER.CREATE", "CONSUMER.DELETE"} {
				require.NotContains(t, s, managing, u.Stage)
			}
		}
	}
	require.Equal(t, append([]string{privileges.StageAdmin}, privileges.Stages...), stages)
}

// TestGrantedOptIns: the scanner may publish delete requests only with
// collect_unregistered_instances.
func TestGrantedOptIns(t *testing.T) {
	n, err := subjects.NewNames("kvcmgc", "c1")
	if err != nil {
		t.Fatal(err)
	}
	scanner := func(us []privileges.NATSUser) privileges.NATSUser {
		for _, u := range us {
			if u.Stage == pipeline.StageScanner {
				return u
			}
		}
		t.Fatal("no scanner")
		return privileges.NATSUser{}
	}
	base := privileges.NATS(n)
	if slices.Contains(scanner(base).Publish, n.DeleteFilter()) {
		t.Fatal("the scanner may publish delete requests without the opt-in")
	}
	off := privileges.Granted(base, func(string) bool { return false })
	if !slices.Equal(scanner(off).Publish, scanner(base).Publish) {
		t.Fatal("an opt-in off changed the scanner's rights")
	}
	on := privileges.Granted(base, func(k string) bool { return k == privileges.OptInCollectUnregistered })
	if !slices.Contains(scanner(on).Publish, n.DeleteFilter()) {
		t.Fatal("collect_unregistered_instances did not let the scanner publish delete requests")
	}
	if slices.Contains(scanner(base).Publish, n.DeleteFilter()) {
		t.Fatal("Granted changed its input")
	}
}
