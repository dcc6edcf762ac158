package deploy_test

import (
	"bytes"
	"errors"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/config"
	"github.com/kvcm-gc/kvcm-gc/deploy/privileges"
	"github.com/kvcm-gc/kvcm-gc/internal/httpserver"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// The values files make test lints and renders: the defaults, and one turning every part on.
var valuesFiles = []string{"", filepath.Join(chartDir, "ci", "full-values.yaml")}

const (
	release   = "kvcm-gc"
	namespace = "kvcm-gc"
)

// rendered is one `helm template` of the chart.
type rendered struct {
	values  string // the values file, "" for the defaults
	v       map[string]any
	objects []object
}

// render runs helm template on the chart with a values file ("" for the defaults) and parses
// every object, hooks included; it also parses the values as helm merges them.
func render(t *testing.T, values string, extra ...string) rendered {
	t.Helper()
	helm := tool(t, "helm")
	args := append([]string{"template", release, chartDir, "--namespace", namespace}, extra...)
	if values != "" {
		args = append(args, "-f", values)
	}
	out := run(t, helm, args...)
	r := rendered{values: values}
	dec := yaml.NewDecoder(bytes.NewReader(out))
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "helm template %s", values)
		if doc != nil {
			r.objects = append(r.objects, object{file: "helm template " + values, doc: doc})
		}
	}
	require.NotEmpty(t, r.objects)
	data, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(data, &r.v))
	if values != "" {
		var over map[string]any
		data, err := os.ReadFile(values)
		require.NoError(t, err)
		require.NoError(t, yaml.Unmarshal(data, &over))
		r.v = mergeValues(r.v, over)
	}
	return r
}

// mergeValues merges over into base as helm does: maps deeply, anything else replaced.
func mergeValues(base, over map[string]any) map[string]any {
	out := maps.Clone(base)
	for k, v := range over {
		if bm, ok := out[k].(map[string]any); ok {
			if om, ok := v.(map[string]any); ok {
				out[k] = mergeValues(bm, om)
				continue
			}
		}
		out[k] = v
	}
	return out
}

func (r rendered) find(t *testing.T, kind, name string) object {
	t.Helper()
	return find(t, r.objects, kind, name)
}

func (r rendered) all(kind string) []object {
	var out []object
	for _, o := range r.objects {
		if o.kind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// stageConfig is one identity's configuration file of the chart's ConfigMap, loaded and
// validated as the binaries do, with the secret files it names.
type stageConfig struct {
	c config.Config
	// files are the secret files the configuration reads (password_file, credentials_file, …).
	files []string
}

// loadConfig loads the ConfigMap's <stage>.yaml. The secret files exist only in the pods
// (mounted from the stage's Secret; TestChart checks the mounts): the configuration is
// validated with stand-ins at their paths.
func (r rendered) loadConfig(t *testing.T, stage string) stageConfig {
	t.Helper()
	cm := r.find(t, "ConfigMap", release+"-config")
	text := str(cm.doc, "data", stage+".yaml")
	require.NotEmpty(t, text, "%s.yaml", stage)
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	c := config.Default()
	require.NoError(t, config.LoadFile(&c, path), "%s: %s", r.values, stage)
	sc := stageConfig{c: c}
	standIn := c
	for _, f := range []*string{&standIn.Registry.PasswordFile, &standIn.Meta.PasswordFile, &standIn.NATS.PasswordFile,
		&standIn.NATS.TokenFile, &standIn.NATS.CredentialsFile, &standIn.NATS.NkeySeedFile,
		&standIn.NATS.TLS.CAFile, &standIn.NATS.TLS.CertFile, &standIn.NATS.TLS.KeyFile,
		&standIn.Registry.TLS.CAFile, &standIn.Meta.TLS.CAFile, &standIn.Guard.PasswordFile} {
		if *f == "" {
			continue
		}
		sc.files = append(sc.files, *f)
		*f = filepath.Join(dir, strings.ReplaceAll(*f, "/", "_"))
		require.NoError(t, os.WriteFile(*f, []byte("stand-in"), 0o600))
	}
	require.NoError(t, standIn.Validate(), "%s: %s", r.values, stage)
	needs := config.Needs{NATS: true, Registry: stage != pipeline.StageDeleter}
	require.NoError(t, standIn.Require(needs), "%s: %s", r.values, stage)
	return sc
}

// stagesOf are the stages the values deploy: the walker and the sweeper with a swept storage.
func (r rendered) stagesOf() []string {
	out := []string{pipeline.StageScanner, pipeline.StageProber, pipeline.StageDeleter}
	for _, s := range get(r.v, "storages").(map[string]any) {
		if b, _ := get(s, "sweep").(bool); b {
			return append(out, pipeline.StageWalker, pipeline.StageSweeper)
		}
	}
	return out
}

// pods are the pod templates of the release: every Deployment's, the hook Job's and the
// report CronJob's.
func (r rendered) pods() map[string]any {
	out := map[string]any{}
	for _, kind := range []string{"Deployment", "Job"} {
		for _, o := range r.all(kind) {
			out[kind+" "+o.name()] = get(o.doc, "spec", "template")
		}
	}
	for _, o := range r.all("CronJob") {
		out["CronJob "+o.name()] = get(o.doc, "spec", "jobTemplate", "spec", "template")
	}
	return out
}

// TestChart renders the chart with each values file and checks what it makes: a Deployment
// per stage running its own binary with its own configuration, Redis user and NATS identity;
// secrets from files of the stage's own Secret, never in the environment or the arguments;
// the storages mounted read-only where only read; dry_run on by default; nobody running as
// root, a read-only root file system, no service account token; probe timeouts above what
// the handlers allow themselves; GOMEMLIMIT under each memory limit; the disruption budgets,
// the network policy, the ensure hook, and the monitoring objects the values ask for.
func TestChart(t *testing.T) {
	for _, values := range valuesFiles {
		name := values
		if name == "" {
			name = "default values"
		}
		t.Run(name, func(t *testing.T) {
			r := render(t, values)
			checkStages(t, r)
			checkPods(t, r)
			checkObjects(t, r)
			checkHooks(t, r)
			checkPrivileges(t, r)
		})
	}
}

// checkHooks checks that a hook's pod is admitted: Helm creates the release's objects only
// after the pre-install hooks, so the ServiceAccount a hook's pod names must be a hook
// itself, created before the pod (a lower weight) at every event the pod's hook runs at.
// TestClusterInstall shows the same on a real API server.
func checkHooks(t *testing.T, r rendered) {
	for _, job := range r.all("Job") {
		events := strings.Split(annotation(job, "helm.sh/hook"), ",")
		if !slices.Contains(events, "pre-install") {
			continue
		}
		name := str(job.doc, "spec", "template", "spec", "serviceAccountName")
		require.NotEmpty(t, name, "Job %s names no ServiceAccount", job.name())
		sa := r.find(t, "ServiceAccount", name)
		saEvents := strings.Split(annotation(sa, "helm.sh/hook"), ",")
		for _, e := range events {
			require.Contains(t, saEvents, e, "Job %s runs at %s, before its ServiceAccount %s exists", job.name(), e, name)
		}
		weight := func(o object) int {
			w, err := strconv.Atoi(annotation(o, "helm.sh/hook-weight"))
			require.NoError(t, err, "%s %s hook-weight", o.kind(), o.name())
			return w
		}
		require.Less(t, weight(sa), weight(job), "ServiceAccount %s must be created before Job %s", name, job.name())
		require.Equal(t, false, get(sa.doc, "automountServiceAccountToken"), "the hook's ServiceAccount mounts no token")
	}
}

func annotation(o object, key string) string {
	return str(o.doc, "metadata", "annotations", key)
}

func checkStages(t *testing.T, r rendered) {
	stages := r.stagesOf()
	if r.values == "" {
		require.Equal(t, []string{pipeline.StageScanner, pipeline.StageProber, pipeline.StageDeleter}, stages)
	} else {
		require.Equal(t, privileges.Stages, stages, "the full values deploy every stage")
	}
	uses := map[string]struct{ registry, meta bool }{
		pipeline.StageScanner: {true, true}, pipeline.StageProber: {true, false}, pipeline.StageDeleter: {false, true},
		pipeline.StageWalker: {true, false}, pipeline.StageSweeper: {true, true},
	}
	redisUsers, natsIDs, secrets := map[string]string{}, map[string]string{}, map[string]string{}
	admin := r.loadConfig(t, privileges.StageAdmin)
	require.False(t, admin.c.JS.SkipEnsure, "the admin creates the topology")
	for _, stage := range stages {
		sc := r.loadConfig(t, stage)
		c := sc.c
		dryRun, _ := get(r.v, "dryRun").(bool)
		if own, ok := get(r.v, "stages", stage, "dryRun").(bool); ok {
			dryRun = own
		}
		require.Equal(t, dryRun, c.DryRun, stage)
		if r.values == "" {
			require.True(t, c.DryRun, "%s: the chart installs dry-run", stage)
		}
		require.True(t, c.JS.SkipEnsure, "%s: only the admin manages the topology", stage)
		require.Equal(t, ":9090", c.HTTP.Listen, stage)
		require.Equal(t, "json", c.Log.Format, stage)

		// Its own Redis user, on the connections it uses and only those.
		u := uses[stage]
		var user string
		for _, conn := range []struct {
			used           bool
			username, file string
		}{{u.registry, c.Registry.Username, c.Registry.PasswordFile}, {u.meta, c.Meta.Username, c.Meta.PasswordFile}} {
			if !conn.used {
				require.Empty(t, conn.username, "%s: a Redis user where it reads nothing", stage)
				require.Empty(t, conn.file, stage)
				continue
			}
			require.NotEmpty(t, conn.username, stage)
			require.NotEmpty(t, conn.file, "%s: the password comes from a file", stage)
			require.True(t, user == "" || user == conn.username, "%s: one Redis user", stage)
			user = conn.username
		}
		require.Empty(t, c.Registry.Password+c.Meta.Password+c.Guard.Password+c.NATS.Password+c.NATS.Token, "%s: a secret in the ConfigMap", stage)
		if c.Guard.Kind == "redis" && c.Guard.URI != "" && stage == pipeline.StageProber {
			require.Equal(t, user, c.Guard.Username, "the prober reads the guard as its own user")
			require.NotEmpty(t, c.Guard.PasswordFile)
		} else {
			require.Empty(t, c.Guard.Username+c.Guard.PasswordFile, "%s: guard credentials it does not use", stage)
		}
		require.NotContains(t, c.Registry.URI, "@", "%s: credentials in the registry URI", stage)
		checkSignIn(t, stage, c, user)
		require.NotEqual(t, admin.c.Registry.Username, user, "%s shares the admin's Redis user", stage)
		for other, ou := range redisUsers {
			require.NotEqual(t, ou, user, "%s and %s share a Redis user", stage, other)
		}
		redisUsers[stage] = user

		// Its own NATS identity: a user of its own, or credentials of its own Secret.
		id := c.NATS.User
		switch {
		case c.NATS.PasswordFile != "":
			require.NotEmpty(t, c.NATS.User, stage)
		case c.NATS.CredentialsFile != "", c.NATS.NkeySeedFile != "":
			id = secretOf(t, r, stage)
		default:
			t.Fatalf("%s: no NATS identity", stage)
		}
		for other, oid := range natsIDs {
			require.NotEqual(t, oid, id, "%s and %s share a NATS identity", stage, other)
		}
		natsIDs[stage] = id
		require.NotEqual(t, admin.c.NATS.User+secretOf(t, r, privileges.StageAdmin), c.NATS.User+secretOf(t, r, stage),
			"%s runs as the admin", stage)
		s := secretOf(t, r, stage)
		for other, os := range secrets {
			require.NotEqual(t, os, s, "%s and %s share a Secret", stage, other)
		}
		secrets[stage] = s
	}
}

// checkEgress: the NetworkPolicy's egress rules are NATS, Redis and DNS, in that order, each
// to the peers of its values and on exactly its ports: NATS and Redis those of the values'
// URIs (wantEgress) and DNS its own, over UDP and TCP.
func checkEgress(t *testing.T, r rendered, np object) {
	t.Helper()
	rules := list(np.doc, "spec", "egress")
	require.Len(t, rules, 3)
	want := wantEgress(t, r.v)
	for _, p := range list(r.v, "networkPolicy", "dns", "ports") {
		want["dns"] = append(want["dns"], p.(int))
	}
	for i, kind := range []string{"nats", "redis", "dns"} {
		var ports []int
		protocols := map[int][]string{}
		for _, p := range list(rules[i], "ports") {
			if !slices.Contains(ports, num(p, "port")) {
				ports = append(ports, num(p, "port"))
			}
			protocols[num(p, "port")] = append(protocols[num(p, "port")], str(p, "protocol"))
		}
		require.NotEmpty(t, ports, "%s: an egress rule without ports allows every port", kind)
		require.ElementsMatch(t, want[kind], ports, "%s egress ports", kind)
		for p, protos := range protocols {
			if kind == "dns" {
				require.ElementsMatch(t, []string{"UDP", "TCP"}, protos, "dns port %d", p)
			} else {
				require.Equal(t, []string{"TCP"}, protos, "%s port %d", kind, p)
			}
		}
		require.Equal(t, get(r.v, "networkPolicy", kind, "to"), nilIfEmpty(get(rules[i], "to")), "%s peers", kind)
	}
}

func nilIfEmpty(v any) any {
	if v == nil {
		return []any{}
	}
	return v
}

// wantEgress are the NATS and Redis ports the values' URIs name (4222 and 6379 where a URI
// names none), with each one's extraPorts.
func wantEgress(t *testing.T, v map[string]any) map[string][]int {
	t.Helper()
	out := map[string][]int{}
	add := func(kind, uri string, def int) {
		rest := uri
		if _, after, ok := strings.Cut(rest, "://"); ok {
			rest = after
		}
		if i := strings.IndexAny(rest, "/?#"); i >= 0 {
			rest = rest[:i]
		}
		port := def
		if _, p, err := net.SplitHostPort(rest); err == nil {
			port, err = strconv.Atoi(p)
			require.NoError(t, err, uri)
		}
		if !slices.Contains(out[kind], port) {
			out[kind] = append(out[kind], port)
		}
	}
	for _, u := range strings.Split(str(v, "nats", "url"), ",") {
		add("nats", strings.TrimSpace(u), 4222)
	}
	add("redis", str(v, "kvcm", "registryURI"), 6379)
	for _, m := range []any{get(v, "kvcm", "storeURIs"), get(v, "kvcm", "groupStoreURIs"),
		get(v, "config", "meta", "store_uris"), get(v, "config", "meta", "group_store_uris")} {
		mm, _ := m.(map[string]any)
		for _, u := range mm {
			add("redis", u.(string), 6379)
		}
	}
	if u := str(v, "guard", "uri"); u != "" {
		add("redis", u, 6379)
	}
	for _, kind := range []string{"nats", "redis"} {
		for _, p := range list(v, "networkPolicy", kind, "extraPorts") {
			if !slices.Contains(out[kind], p.(int)) {
				out[kind] = append(out[kind], p.(int))
			}
		}
	}
	return out
}

// checkSignIn: every Redis connection of a stage's configuration signs in as the stage's own
// ACL user, as the binaries build them (config, redismeta): the registry, each metadata store
// the values name (meta.store_uris, a group's meta.group_store_uris) and the guard; no URI
// carries userinfo that would sign in instead.
func checkSignIn(t *testing.T, stage string, c config.Config, user string) {
	t.Helper()
	if c.Registry.Username != "" {
		conn, err := c.RegistryConn()
		require.NoError(t, err, stage)
		require.Equal(t, user, conn.Username, "%s: the registry", stage)
		require.Empty(t, conn.UserInfo, "%s: the registry", stage)
	}
	if c.Meta.Username != "" {
		pool := redismeta.NewPool(redismeta.PoolOptions{Defaults: c.MetaConn(), URIs: c.Meta.StoreURIs})
		for name := range c.Meta.StoreURIs {
			conn, err := pool.ConnOptions(name)
			require.NoError(t, err, "%s: store %s", stage, name)
			require.Equal(t, user, conn.Username, "%s: store %s", stage, name)
			require.Empty(t, conn.UserInfo, "%s: store %s", stage, name)
		}
		for group, uri := range c.Meta.GroupStoreURIs {
			conn, err := c.MetaConn().ApplyURI(uri)
			require.NoError(t, err, "%s: group %s", stage, group)
			require.Equal(t, user, conn.Username, "%s: group %s", stage, group)
			require.Empty(t, conn.UserInfo, "%s: group %s", stage, group)
		}
	}
	if c.Guard.URI != "" && c.Guard.Username != "" {
		conn, err := c.GuardConn()
		require.NoError(t, err, stage)
		require.Equal(t, user, conn.Username, "%s: the guard", stage)
		require.Empty(t, conn.UserInfo, "%s: the guard", stage)
	}
}

// secretOf is the Secret the identity's pods mount its credentials from.
func secretOf(t *testing.T, r rendered, stage string) string {
	t.Helper()
	kind, name := "Deployment", release+"-"+stage
	if stage == privileges.StageAdmin {
		kind, name = "Job", release+"-ensure"
	}
	for _, v := range list(r.find(t, kind, name).doc, "spec", "template", "spec", "volumes") {
		if str(v, "name") == "secrets" {
			return str(v, "secret", "secretName")
		}
	}
	t.Fatalf("%s %s mounts no secrets volume", kind, name)
	return ""
}

// configOfPod is the identity whose configuration a pod mounts.
func configOfPod(t *testing.T, pod any) string {
	for _, v := range list(pod, "spec", "volumes") {
		if str(v, "name") == "config" {
			items := list(v, "configMap", "items")
			require.Len(t, items, 1)
			require.Equal(t, "config.yaml", str(items[0], "path"))
			return strings.TrimSuffix(str(items[0], "key"), ".yaml")
		}
	}
	t.Fatal("no config volume")
	return ""
}

func checkPods(t *testing.T, r rendered) {
	envKeys := map[string]bool{"GOMEMLIMIT": true, "GOGC": true}
	for _, k := range config.Keys() {
		envKeys[k.Env] = true
	}
	for _, e := range list(r.v, "extraEnv") { // the values' own, on every container
		envKeys[str(e, "name")] = true
	}
	pct := num(r.v, "goRuntime", "memoryLimitPercent")
	require.Positive(t, pct)
	deployed := map[string]bool{}
	for where, pod := range r.pods() {
		spec := get(pod, "spec")
		stage := configOfPod(t, pod)
		deployed[stage] = true
		sc := r.loadConfig(t, stage)

		// Nobody is root, nothing but /tmp and the data written, no Kubernetes API token.
		require.Equal(t, false, get(spec, "automountServiceAccountToken"), where)
		require.Equal(t, true, get(spec, "securityContext", "runAsNonRoot"), where)
		require.Positive(t, num(spec, "securityContext", "runAsUser"), where)
		containers := list(spec, "containers")
		require.Len(t, containers, 1, where)
		require.Empty(t, list(spec, "initContainers"), where)
		ct := containers[0]
		require.Equal(t, true, get(ct, "securityContext", "readOnlyRootFilesystem"), where)
		require.Equal(t, false, get(ct, "securityContext", "allowPrivilegeEscalation"), where)
		require.Equal(t, []any{"ALL"}, list(ct, "securityContext", "capabilities", "drop"), where)
		if u := get(ct, "securityContext", "runAsUser"); u != nil {
			require.Positive(t, num(ct, "securityContext", "runAsUser"), where)
		}

		// Its binary and its configuration.
		cmd := list(ct, "command")
		require.Len(t, cmd, 1, where)
		bin := strings.TrimPrefix(cmd[0].(string), "/usr/local/bin/")
		_, err := os.Stat(filepath.Join("..", "cmd", bin, "main.go"))
		require.NoError(t, err, "%s: no cmd/%s", where, bin)
		args := list(ct, "args")
		if stage == privileges.StageAdmin {
			require.Equal(t, "kvcm-gc", bin, where)
		} else {
			require.Equal(t, stage, bin, where)
			require.Equal(t, []any{"--config", "/etc/kvcm-gc/config.yaml"}, args, where)
		}
		require.Contains(t, args, "/etc/kvcm-gc/config.yaml", where)
		for _, a := range args {
			require.NotContains(t, strings.ToLower(a.(string)), "password", "%s: a secret as an argument", where)
		}

		// The environment: configuration keys and the Go runtime's, no secret.
		for _, e := range list(ct, "env") {
			require.True(t, envKeys[str(e, "name")], "%s: env %s is no configuration key", where, str(e, "name"))
			require.Nil(t, get(e, "valueFrom", "secretKeyRef"), "%s: a secret in the environment", where)
			require.NotContains(t, str(e, "name"), "PASSWORD", where)
			require.NotContains(t, str(e, "name"), "TOKEN", where)
		}
		if limit := str(ct, "resources", "limits", "memory"); limit != "" {
			got := envValue(ct, "GOMEMLIMIT")
			require.NotEmpty(t, got, "%s: no GOMEMLIMIT under its memory limit %s", where, limit)
			n, err := strconv.ParseInt(got, 10, 64)
			require.NoError(t, err)
			require.Equal(t, quantity(t, limit)*int64(pct)/100, n, "%s: GOMEMLIMIT is %d%% of %s", where, pct, limit)
		}
		for _, res := range []string{"requests", "limits"} {
			for _, k := range []string{"cpu", "memory"} {
				require.NotNil(t, get(ct, "resources", res, k), "%s: resources.%s.%s", where, res, k)
			}
		}

		// Probes: above what the handler allows itself (/readyz bounds its pings).
		if strings.HasPrefix(where, "Deployment") {
			require.Equal(t, "/healthz", str(ct, "livenessProbe", "httpGet", "path"), where)
			require.GreaterOrEqual(t, num(ct, "livenessProbe", "timeoutSeconds"), 1, where)
			if stage != privileges.StageAdmin {
				require.Equal(t, "/readyz", str(ct, "readinessProbe", "httpGet", "path"), where)
				timeout := time.Duration(num(ct, "readinessProbe", "timeoutSeconds")) * time.Second
				require.Greater(t, timeout, httpserver.ReadyTimeout, "%s: readiness timeout", where)
				require.Equal(t, "http", str(ct, "readinessProbe", "httpGet", "port"), where)
				require.Equal(t, 9090, num(list(ct, "ports")[0], "containerPort"), where)
			}
		}

		// Mounts: the configuration; every file it names from the identity's own Secret,
		// key for key; the storages it works on, read-only where it only reads.
		volumes := map[string]any{}
		for _, v := range list(spec, "volumes") {
			require.NotContains(t, volumes, str(v, "name"), where)
			volumes[str(v, "name")] = v
		}
		type mount struct {
			volume   string
			readOnly bool
		}
		mounts := map[string]mount{}
		for _, m := range list(ct, "volumeMounts") {
			require.Contains(t, volumes, str(m, "name"), "%s: a mount of an undeclared volume", where)
			ro, _ := get(m, "readOnly").(bool)
			mounts[str(m, "mountPath")] = mount{str(m, "name"), ro}
		}
		mountAt := func(path string) (string, mount) {
			best := ""
			for mp := range mounts {
				if hasPrefixDir(path, mp) && len(mp) > len(best) {
					best = mp
				}
			}
			require.NotEmpty(t, best, "%s: nothing mounted at %s", where, path)
			return best, mounts[best]
		}
		_, cm := mountAt("/etc/kvcm-gc/config.yaml")
		wantCM := release + "-config"
		if where == "Job "+release+"-ensure" {
			wantCM = release + "-ensure" // a hook: it exists before the release's ConfigMap
		}
		require.Equal(t, wantCM, str(volumes[cm.volume], "configMap", "name"), where)
		require.True(t, cm.readOnly, where)
		for _, f := range sc.files {
			mp, m := mountAt(f)
			require.True(t, m.readOnly, "%s: %s", where, f)
			v := volumes[m.volume]
			require.NotEmpty(t, str(v, "secret", "secretName"), "%s: %s is not from a Secret", where, f)
			key := strings.TrimPrefix(f, mp+"/")
			var keys []string
			for _, it := range list(v, "secret", "items") {
				keys = append(keys, str(it, "key"))
				require.Equal(t, str(it, "key"), str(it, "path"), where)
			}
			require.Contains(t, keys, key, "%s: %s is not an item of its Secret", where, f)
		}
		// Every mount not of the configuration, the secrets or /tmp is a storage's.
		dataMounts := map[string]mount{}
		for mp, m := range mounts {
			v := volumes[m.volume]
			if get(v, "configMap") != nil || get(v, "secret") != nil || get(v, "emptyDir") != nil {
				continue
			}
			dataMounts[mp] = m
		}
		want := map[string]bool{} // the storage paths the stage works on
		for name, o := range sc.c.Storage.Overrides {
			probe := o.Probe
			if probe == "" {
				probe = sc.c.Storage.DefaultProbe
			}
			del := o.Delete == nil || *o.Delete
			var uses bool
			switch stage {
			case pipeline.StageProber:
				uses = probe == "stat"
			case pipeline.StageDeleter:
				uses = del && get(r.v, "storages", name, "volume") != nil
			case pipeline.StageWalker, pipeline.StageSweeper:
				uses = o.Sweep
			}
			for _, pm := range o.PathMap {
				if uses {
					// The storage's files are opened through the directory holding its mapped
					// root (the root up to its last '/'), and the quarantine sits there: that
					// directory must be inside the mount.
					mp, _ := mountAt(pm.To[:strings.LastIndexByte(pm.To, '/')])
					want[mp] = true
				}
			}
		}
		for mp, m := range dataMounts {
			require.True(t, want[mp], "%s mounts %s, which it does not work on", where, mp)
			switch stage {
			case pipeline.StageProber, pipeline.StageWalker:
				require.True(t, m.readOnly, "%s: the %s only reads %s: mount it read-only", where, stage, mp)
			case pipeline.StageDeleter, pipeline.StageSweeper:
				require.False(t, m.readOnly, "%s: the %s unlinks under %s", where, stage, mp)
			default:
				t.Fatalf("%s mounts storage %s", where, mp)
			}
		}
		for mp := range want {
			require.Contains(t, dataMounts, mp, "%s: storage at %s not mounted", where, mp)
		}
		if stage == pipeline.StageProber && r.values != "" {
			require.NotEmpty(t, dataMounts, "the full values' prober stats a storage")
		}
	}
	for _, stage := range r.stagesOf() {
		require.True(t, deployed[stage], "no pod runs the %s", stage)
	}
	require.True(t, deployed[privileges.StageAdmin], "the ensure hook runs as the admin")
}

func envValue(ct any, name string) string {
	for _, e := range list(ct, "env") {
		if str(e, "name") == name {
			return str(e, "value")
		}
	}
	return ""
}

// quantity is a Kubernetes memory quantity in bytes.
func quantity(t *testing.T, q string) int64 {
	t.Helper()
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"", 1}} {
		if n, ok := strings.CutSuffix(q, u.suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			if err == nil {
				return v * u.mult
			}
		}
	}
	t.Fatalf("memory quantity %q", q)
	return 0
}

// selects reports whether a selector's matchLabels all hold in labels.
func selects(selector, labels any) bool {
	m, _ := selector.(map[string]any)
	l, _ := labels.(map[string]any)
	if len(m) == 0 {
		return false
	}
	for k, v := range m {
		if l[k] != v {
			return false
		}
	}
	return true
}

func checkObjects(t *testing.T, r rendered) {
	// The image: the chart's appVersion unless the values name a tag.
	chart, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	require.NoError(t, err)
	var meta struct {
		AppVersion string `yaml:"appVersion"`
	}
	require.NoError(t, yaml.Unmarshal(chart, &meta))
	tag := str(r.v, "image", "tag")
	if tag == "" {
		tag = meta.AppVersion
	}
	for where, pod := range r.pods() {
		ct := list(pod, "spec", "containers")[0]
		require.Equal(t, str(r.v, "image", "repository")+":"+tag, str(ct, "image"), where)
	}

	// One Deployment per stage, its pods selected by its selector only.
	for _, stage := range r.stagesOf() {
		d := r.find(t, "Deployment", release+"-"+stage)
		labels := get(d.doc, "spec", "template", "metadata", "labels")
		require.True(t, selects(get(d.doc, "spec", "selector", "matchLabels"), labels), stage)
		require.Equal(t, stage, get(labels, "app.kubernetes.io/component"))
		replicas := num(d.doc, "spec", "replicas")
		require.Equal(t, num(r.v, "stages", stage, "replicas"), replicas, stage)
		// A disruption budget for every stage of more than one replica.
		if replicas > 1 {
			pdb := r.find(t, "PodDisruptionBudget", release+"-"+stage)
			require.True(t, selects(get(pdb.doc, "spec", "selector", "matchLabels"), labels), stage)
			// helm template's server is recent: unready pods may be evicted.
			require.Equal(t, "AlwaysAllow", str(pdb.doc, "spec", "unhealthyPodEvictionPolicy"), stage)
		}
	}
	require.Len(t, r.all("Deployment"), len(r.stagesOf())+map[bool]int{true: 1}[get(r.v, "admin", "ops", "enabled") == true])

	// The ServiceAccount mounts no token; the Service selects the stage pods only.
	sa := r.find(t, "ServiceAccount", release)
	require.Equal(t, false, get(sa.doc, "automountServiceAccountToken"))
	svc := r.find(t, "Service", release+"-metrics")
	require.Equal(t, 9090, num(list(svc.doc, "spec", "ports")[0], "port"))
	for where, pod := range r.pods() {
		stage := configOfPod(t, pod)
		require.Equal(t, stage != privileges.StageAdmin, selects(get(svc.doc, "spec", "selector"), get(pod, "metadata", "labels")), where)
	}

	// The network policy: every pod of the release, egress to the NATS, Redis and DNS ports
	// only, ingress to the metrics port only.
	np := r.find(t, "NetworkPolicy", release)
	for where, pod := range r.pods() {
		require.True(t, selects(get(np.doc, "spec", "podSelector", "matchLabels"), get(pod, "metadata", "labels")), where)
	}
	require.ElementsMatch(t, []any{"Ingress", "Egress"}, list(np.doc, "spec", "policyTypes"))
	checkEgress(t, r, np)
	for _, rule := range list(np.doc, "spec", "ingress") {
		for _, p := range list(rule, "ports") {
			require.Equal(t, 9090, num(p, "port"))
		}
	}

	// The ensure hook runs before the release's objects, its configuration before it.
	job := r.find(t, "Job", release+"-ensure")
	require.Equal(t, "pre-install,pre-upgrade,pre-rollback", str(job.doc, "metadata", "annotations", "helm.sh/hook"))
	ct := list(job.doc, "spec", "template", "spec", "containers")[0]
	require.Equal(t, "ensure", list(ct, "args")[0])
	// With admin.ensure.update an upgrade's changed jetstream values are updated in place.
	update, _ := get(r.v, "admin", "ensure", "update").(bool)
	require.Equal(t, update, slices.Contains(list(ct, "args"), any("--update")), "ensure --update as admin.ensure.update says")
	hookCM := r.find(t, "ConfigMap", release+"-ensure")
	require.Equal(t, "pre-install,pre-upgrade,pre-rollback", str(hookCM.doc, "metadata", "annotations", "helm.sh/hook"))
	w := func(o object) int {
		n, err := strconv.Atoi(str(o.doc, "metadata", "annotations", "helm.sh/hook-weight"))
		require.NoError(t, err)
		return n
	}
	require.Less(t, w(hookCM), w(job))
	require.Equal(t, str(r.find(t, "ConfigMap", release+"-config").doc, "data", "admin.yaml"), str(hookCM.doc, "data", "admin.yaml"))

	// Monitoring, as the values ask: the rules, each linking its runbook heading where the
	// values point (TestAlertsFile, TestAlertsFollowValues check what they say).
	sm, _ := get(r.v, "monitoring", "serviceMonitor", "enabled").(bool)
	require.Len(t, r.all("ServiceMonitor"), map[bool]int{true: 1}[sm])
	if sm {
		o := r.all("ServiceMonitor")[0]
		require.True(t, selects(get(o.doc, "spec", "selector", "matchLabels"), get(svc.doc, "metadata", "labels")))
	}
	pr, _ := get(r.v, "monitoring", "prometheusRule", "enabled").(bool)
	require.Len(t, r.all("PrometheusRule"), map[bool]int{true: 1}[pr])
	if pr {
		o := r.all("PrometheusRule")[0]
		spec, err := yaml.Marshal(get(o.doc, "spec"))
		require.NoError(t, err)
		rules := parseAlerts(t, spec)
		require.NotEmpty(t, rules)
		for _, rule := range rules {
			require.Equal(t, str(r.v, "monitoring", "prometheusRule", "runbookURL")+"#"+strings.ToLower(rule.Alert),
				rule.Annotations["runbook_url"])
		}
	}

	// Nothing else: every kind the chart makes is accounted for.
	kinds := map[string]bool{}
	for _, o := range r.objects {
		kinds[o.kind()] = true
	}
	require.Subset(t, []string{"ConfigMap", "Deployment", "Job", "PodDisruptionBudget", "Service", "ServiceAccount",
		"NetworkPolicy", "ServiceMonitor", "PrometheusRule", "CronJob"}, slices.Collect(maps.Keys(kinds)))
	require.NotContains(t, kinds, "Secret", "the chart never holds a credential")
}

// checkPrivileges: the privileges ConfigMap holds what deploy/privileges renders for the
// release's cluster, prefix, guard prefix and user names.
func checkPrivileges(t *testing.T, r rendered) {
	cm := r.find(t, "ConfigMap", release+"-privileges")
	c := r.loadConfig(t, privileges.StageAdmin).c
	names, err := subjects.NewNames(c.Prefix, c.Cluster)
	require.NoError(t, err)
	redisUsers := map[string]string{privileges.StageAdmin: str(r.v, "admin", "redisUser")}
	natsUsers := map[string]string{privileges.StageAdmin: str(r.v, "admin", "natsUser")}
	for _, stage := range privileges.Stages {
		redisUsers[stage] = str(r.v, "stages", stage, "redisUser")
		natsUsers[stage] = str(r.v, "stages", stage, "natsUser")
	}
	require.Equal(t, privileges.ACLFile(privileges.Redis(c.Guard.Prefix), redisUsers), str(cm.doc, "data", "users.acl"))
	// A user's opt-ins are granted as the stages' configuration turns them on.
	granted := privileges.Granted(privileges.NATS(names), func(key string) bool {
		return key == privileges.OptInCollectUnregistered && c.Scanner.CollectUnregistered
	})
	require.Equal(t, privileges.AccountConfig(granted, natsUsers), str(cm.doc, "data", "nats-account.conf"))
	var perms struct {
		Users []struct {
			Stage, User string
			Publish     struct{ Allow []string }
			Subscribe   struct{ Allow []string }
		}
	}
	require.NoError(t, yaml.Unmarshal([]byte(str(cm.doc, "data", "nats-permissions.yaml")), &perms))
	nu := granted
	require.Len(t, perms.Users, len(nu))
	for i, u := range nu {
		require.Equal(t, u.Stage, perms.Users[i].Stage)
		require.Equal(t, natsUsers[u.Stage], perms.Users[i].User)
		require.Equal(t, u.Publish, perms.Users[i].Publish.Allow, u.Stage)
		require.Equal(t, u.Subscribe, perms.Users[i].Subscribe.Allow, u.Stage)
	}
	// The stages sign in as the users the privileges name.
	for _, stage := range r.stagesOf() {
		sc := r.loadConfig(t, stage).c
		if sc.NATS.User != "" {
			require.Equal(t, natsUsers[stage], sc.NATS.User, stage)
		}
		if sc.Registry.Username != "" {
			require.Equal(t, redisUsers[stage], sc.Registry.Username, stage)
		}
		if sc.Meta.Username != "" {
			require.Equal(t, redisUsers[stage], sc.Meta.Username, stage)
		}
	}
}

// TestChartLint runs helm lint on the chart with each values file, and shows that the
// values schema and the chart refuse what they must: a misspelt key, an unknown auth
// kind, a swept storage without physical deletes or without a mount.
func TestChartLint(t *testing.T) {
	helm := tool(t, "helm")
	for _, values := range valuesFiles {
		args := []string{"lint", chartDir, "--strict"}
		if values != "" {
			args = append(args, "-f", values)
		}
		run(t, helm, args...)
	}
	for _, c := range []struct{ set, want string }{
		{"storage.nfs.probe=stat", "additional properties 'storage' not allowed"},
		{"nats.auth=jwt", "/nats/auth"},
		{"storages.nfs.sweep=true,storages.nfs.delete=false", "sweep removes files, so it needs delete on"},
		{"storages.nfs.sweep=true", "give it a volume and a mountPath"},
		{"kvcm.registryURI=redis://r:6379", "no cluster_name parameter"},
	} {
		out, err := exec.Command(helm, "template", release, chartDir, "--set", c.set).CombinedOutput()
		require.Error(t, err, "--set %s renders", c.set)
		require.Contains(t, string(out), c.want, c.set)
	}
}

// TestChartRefusesCredentials: a URI with userinfo anywhere in the values, or a password or
// token key of the configuration, fails the render (the schema first where it can say it,
// the templates for the rest and for a render without the schema), naming the value and
// never printing the credential. A password rendered into a ConfigMap would be readable by
// anyone who may read ConfigMaps, and a store URI's userinfo would sign in instead of the
// stage's own ACL user.
func TestChartRefusesCredentials(t *testing.T) {
	helm := tool(t, "helm")
	const secret = "s3cr3t-pw"
	for _, c := range []struct{ set, schema, path string }{
		{"kvcm.registryURI=redis://gc:" + secret + "@r:6379?cluster_name=c", "/kvcm/registryURI", "kvcm.registryURI"},
		{"kvcm.registryURI=redis://" + secret + "@r:6379?cluster_name=c", "/kvcm/registryURI", "kvcm.registryURI"},
		{"kvcm.storeURIs.meta-0:6379=redis://:" + secret + "@meta-0:6379", "/kvcm/storeURIs/meta-0:6379", "kvcm.storeURIs.meta-0:6379"},
		{"kvcm.groupStoreURIs.g=rediss://gc:" + secret + "@meta-b:6380", "/kvcm/groupStoreURIs/g", "kvcm.groupStoreURIs.g"},
		{"guard.kind=redis,guard.uri=redis://gc:" + secret + "@g:6379", "/guard/uri", "guard.uri"},
		{`nats.url=nats://n0:4222\,nats://gc:` + secret + "@n1:4222", "/nats/url", "nats.url"},
		{"config.meta.store_uris.m:1=redis://gc:" + secret + "@m:1", "", "config.meta.store_uris.m:1"},
		{"stages.scanner.config.guard.uri=redis://gc:" + secret + "@g:1", "", "stages.scanner.config.guard.uri"},
		{"config.registry.password=" + secret, "", "config.registry.password"},
		{"stages.prober.config.nats.token=" + secret, "", "stages.prober.config.nats.token"},
	} {
		for _, skip := range []bool{false, true} {
			args := []string{"template", release, chartDir, "--set", c.set}
			if skip {
				args = append(args, "--skip-schema-validation")
			}
			out, err := exec.Command(helm, args...).CombinedOutput()
			require.Error(t, err, "--set %s renders", c.set)
			require.NotContains(t, string(out), secret, "the error prints the credential")
			if c.schema != "" && !skip {
				require.Contains(t, string(out), "at '"+c.schema+"': 'not' failed", c.set)
			} else {
				require.Contains(t, string(out), c.path+": ", c.set)
			}
		}
	}
	// A '@' after the authority (a parameter) is no userinfo.
	run(t, helm, "template", release, chartDir, "--set", "kvcm.registryURI=redis://r:6379?cluster_name=c&note=a@b")
}

// TestChartNetworkPolicyPorts: the Redis and NATS egress follows the URIs of the values,
// wherever they name their ports, and extraPorts adds the stores KVCM's registry names.
func TestChartNetworkPolicyPorts(t *testing.T) {
	dir := t.TempDir()
	values := filepath.Join(dir, "values.yaml")
	require.NoError(t, os.WriteFile(values, []byte(`kvcm:
  registryURI: redis://kvcm-registry:7000?cluster_name=c
  storeURIs: {"10.0.0.7:6379": "rediss://meta-0:7001", "10.0.0.8:6379": "redis://meta-1"}
  groupStoreURIs: {g: "redis://[fd00::5]:7002/"}
guard: {kind: redis, uri: "redis://guard:7003?timeout_ms=10"}
nats: {url: "nats://n0:5222, tls://n1, nats://n2:5223"}
networkPolicy:
  redis: {extraPorts: [7100]}
  nats: {extraPorts: [5224]}
`), 0o644))
	r := render(t, values)
	np := r.find(t, "NetworkPolicy", release)
	checkEgress(t, r, np)
	require.Equal(t, map[string][]int{"nats": {4222, 5222, 5223, 5224}, "redis": {6379, 7000, 7001, 7002, 7003, 7100}},
		sortedValues(wantEgress(t, r.v)), "the ports the test means")
	var redis []int
	for _, p := range list(list(np.doc, "spec", "egress")[1], "ports") {
		redis = append(redis, num(p, "port"))
	}
	require.Equal(t, []int{6379, 7000, 7001, 7002, 7003, 7100}, redis, "sorted, each once")
}

func sortedValues(m map[string][]int) map[string][]int {
	for k, v := range m {
		m[k] = slices.Sorted(slices.Values(v))
	}
	return m
}

// TestChartDisruptionBudgets: a Redis or NATS outage makes every stage unready at once; the
// budgets then let the unready pods be evicted (unhealthyPodEvictionPolicy: AlwaysAllow), so
// node drains go on. A server older than 1.27, which has no such field (beta and on by default
// from 1.27), gets none; a stage may keep IfHealthyBudget.
func TestChartDisruptionBudgets(t *testing.T) {
	for _, c := range []struct {
		kube string
		want string
	}{{"1.25.0", ""}, {"1.26.9", ""}, {"1.27.0", "AlwaysAllow"}, {"1.31.2", "AlwaysAllow"}} {
		r := render(t, "", "--kube-version", c.kube)
		pdbs := r.all("PodDisruptionBudget")
		require.Len(t, pdbs, 3, c.kube)
		for _, pdb := range pdbs {
			require.Equal(t, c.want, str(pdb.doc, "spec", "unhealthyPodEvictionPolicy"), "%s on %s", pdb.name(), c.kube)
			if c.want == "" {
				require.NotContains(t, get(pdb.doc, "spec"), "unhealthyPodEvictionPolicy", c.kube)
			}
		}
	}
	r := render(t, "", "--kube-version", "1.30.0", "--set", "stages.deleter.pdb.unhealthyPodEvictionPolicy=IfHealthyBudget")
	require.Equal(t, "IfHealthyBudget", str(r.find(t, "PodDisruptionBudget", release+"-deleter").doc, "spec", "unhealthyPodEvictionPolicy"))
	require.Equal(t, "AlwaysAllow", str(r.find(t, "PodDisruptionBudget", release+"-prober").doc, "spec", "unhealthyPodEvictionPolicy"))
}

// TestChartKnobs: the full values turn on what the Thanos, Loki and Mimir charts offer, and
// each lands where it must: a priority class, labels, annotations, environment, volumes and
// mounts on every pod (the hook's and the ops pod's too), a stage's own on its pods only, on
// top of the global ones; topology spread constraints that select the stage's pods; the
// ServiceMonitor's relabelings; the dashboard in a ConfigMap for Grafana's sidecar. No
// podLabels value can change the labels the selectors use.
func TestChartKnobs(t *testing.T) {
	r := render(t, valuesFiles[1])
	stageOf := func(where string, pod any) string {
		if stage := configOfPod(t, pod); stage != privileges.StageAdmin {
			return stage
		}
		return ""
	}
	for where, pod := range r.pods() {
		stage := stageOf(where, pod)
		sv := get(r.v, "stages", stage)
		spec := get(pod, "spec")
		wantPC := str(r.v, "priorityClassName")
		if pc := str(sv, "priorityClassName"); pc != "" {
			wantPC = pc
		}
		require.NotEmpty(t, wantPC)
		require.Equal(t, wantPC, str(spec, "priorityClassName"), where)

		labels := get(pod, "metadata", "labels").(map[string]any)
		annotations := get(pod, "metadata", "annotations").(map[string]any)
		for k, v := range get(r.v, "podLabels").(map[string]any) {
			require.Equal(t, v, labels[k], "%s: label %s", where, k)
		}
		wantAnn := maps.Clone(get(r.v, "podAnnotations").(map[string]any))
		if m, ok := get(sv, "podLabels").(map[string]any); ok {
			for k, v := range m {
				require.Equal(t, v, labels[k], "%s: label %s", where, k)
			}
		}
		if m, ok := get(sv, "podAnnotations").(map[string]any); ok {
			maps.Copy(wantAnn, m) // the stage's win
		}
		for k, v := range wantAnn {
			require.Equal(t, v, annotations[k], "%s: annotation %s", where, k)
		}

		ct := list(spec, "containers")[0]
		require.Equal(t, "UTC", envValue(ct, "TZ"), where)
		volumes := map[string]any{}
		for _, v := range list(spec, "volumes") {
			volumes[str(v, "name")] = v
		}
		mounts := map[string]string{}
		for _, m := range list(ct, "volumeMounts") {
			mounts[str(m, "name")] = str(m, "mountPath")
		}
		require.Equal(t, "kvcm-gc-ca-bundle", str(volumes["ca-bundle"], "configMap", "name"), where)
		require.Equal(t, "/etc/ssl/kvcm-gc", mounts["ca-bundle"], where)
		if stage == pipeline.StageSweeper {
			require.Equal(t, "/scratch", mounts["scratch"], where)
			require.NotNil(t, get(volumes["scratch"], "emptyDir"), where)
		} else {
			require.NotContains(t, volumes, "scratch", "%s: the sweeper's volume", where)
		}

		tsc := list(spec, "topologySpreadConstraints")
		if stage == pipeline.StageScanner {
			require.Len(t, tsc, 1)
			require.Equal(t, "topology.kubernetes.io/zone", str(tsc[0], "topologyKey"))
			require.True(t, selects(get(tsc[0], "labelSelector", "matchLabels"), labels), "the constraint selects the scanners")
			other := get(r.find(t, "Deployment", release+"-prober").doc, "spec", "template", "metadata", "labels")
			require.False(t, selects(get(tsc[0], "labelSelector", "matchLabels"), other), "and only them")
		} else {
			require.Empty(t, tsc, where)
		}
	}

	sm := r.all("ServiceMonitor")[0]
	ep := list(sm.doc, "spec", "endpoints")[0]
	require.Equal(t, get(r.v, "monitoring", "serviceMonitor", "relabelings"), get(ep, "relabelings"))
	require.Equal(t, get(r.v, "monitoring", "serviceMonitor", "metricRelabelings"), get(ep, "metricRelabelings"))
	require.Equal(t, "10s", str(ep, "scrapeTimeout"))

	cm := r.find(t, "ConfigMap", release+"-dashboard")
	require.Equal(t, "1", str(cm.doc, "metadata", "labels", "grafana_dashboard"), "the sidecar's label")
	require.Equal(t, "kvcm", str(cm.doc, "metadata", "annotations", "grafana_folder"))
	dashboard, err := os.ReadFile(filepath.Join("grafana", "kvcm-gc.json"))
	require.NoError(t, err)
	require.JSONEq(t, string(dashboard), str(cm.doc, "data", "kvcm-gc.json"))

	// The defaults add nothing of it; podLabels cannot move a pod out of its selector.
	d := render(t, "", "--set", "podLabels.app\\.kubernetes\\.io/component=other,stages.scanner.podLabels.app\\.kubernetes\\.io/instance=other")
	require.Empty(t, d.all("ServiceMonitor"))
	for _, o := range d.objects {
		require.NotEqual(t, release+"-dashboard", o.name(), "a dashboard ConfigMap by default")
	}
	for _, stage := range d.stagesOf() {
		dep := d.find(t, "Deployment", release+"-"+stage)
		require.True(t, selects(get(dep.doc, "spec", "selector", "matchLabels"), get(dep.doc, "spec", "template", "metadata", "labels")), stage)
		require.Empty(t, str(dep.doc, "spec", "template", "spec", "priorityClassName"), stage)
	}
}

// TestChartReportJob: the promotion gate runs without the ops pod. The suspended CronJob
// <release>-report never runs on its own; `kubectl create job --from=cronjob/…` copies its
// jobTemplate into a Job, which runs `kvcm-gc report` once as the admin (its configuration
// and Secret, as the ops pod has them), is not retried, and goes a day after it ended, its log
// readable until then with `kubectl logs job/…`. It is the only pod of the release beside the
// hook that mounts the admin's Secret, and only while it runs.
func TestChartReportJob(t *testing.T) {
	for _, values := range valuesFiles {
		r := render(t, values)
		cj := r.find(t, "CronJob", release+"-report")
		spec := get(cj.doc, "spec")
		require.Equal(t, true, get(spec, "suspend"), "it runs only as the template of a Job")
		require.Equal(t, "Forbid", str(spec, "concurrencyPolicy"))
		require.Len(t, strings.Fields(str(spec, "schedule")), 5, "a cron schedule")
		job := get(spec, "jobTemplate", "spec")
		require.Equal(t, 0, num(job, "backoffLimit"), "a report that fails is not run again")
		require.Positive(t, num(job, "activeDeadlineSeconds"))
		require.Equal(t, 86400, num(job, "ttlSecondsAfterFinished"))
		pod := get(job, "template")
		require.Equal(t, "Never", str(pod, "spec", "restartPolicy"))
		require.Equal(t, privileges.StageAdmin, configOfPod(t, pod), "the admin's configuration")
		ct := list(pod, "spec", "containers")[0]
		require.Equal(t, []any{"/usr/local/bin/kvcm-gc"}, list(ct, "command"))
		require.Equal(t, []any{"report", "--config", "/etc/kvcm-gc/config.yaml"}, list(ct, "args"))
		var secret string
		for _, v := range list(pod, "spec", "volumes") {
			if str(v, "name") == "secrets" {
				secret = str(v, "secret", "secretName")
			}
		}
		require.Equal(t, secretOf(t, r, privileges.StageAdmin), secret, "the admin's Secret")
		for _, v := range list(pod, "spec", "volumes") {
			if str(v, "name") == "config" {
				require.Equal(t, release+"-config", str(v, "configMap", "name"), "the release's configuration, as the ops pod's")
			}
		}
		require.True(t, selects(get(r.find(t, "NetworkPolicy", release).doc, "spec", "podSelector", "matchLabels"),
			get(pod, "metadata", "labels")), "the network policy lets it reach NATS and Redis")
		require.False(t, selects(get(r.find(t, "Service", release+"-metrics").doc, "spec", "selector"),
			get(pod, "metadata", "labels")), "no stage: not scraped")
	}
	// The guide's promotion gate names the CronJob the chart makes.
	require.Contains(t, documentedCommand(t, "--from=cronjob/"), "create job --from=cronjob/"+release+"-report report-1")
	require.Contains(t, documentedCommand(t, "logs job/report-"), "logs job/report-1")

	r := render(t, "", "--set", "admin.report.enabled=false")
	require.Empty(t, r.all("CronJob"))
	r = render(t, "", "--set", "admin.report.suspend=false,admin.report.schedule=30 7 * * 1", "--set-json", `admin.report.extraArgs=["--json"]`)
	cj := r.find(t, "CronJob", release+"-report")
	require.Equal(t, false, get(cj.doc, "spec", "suspend"))
	require.Equal(t, "30 7 * * 1", str(cj.doc, "spec", "schedule"))
	require.Equal(t, []any{"report", "--config", "/etc/kvcm-gc/config.yaml", "--json"},
		list(list(cj.doc, "spec", "jobTemplate", "spec", "template", "spec", "containers")[0], "args"))
}
