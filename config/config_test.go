package config

import (
	"bytes"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/kvcm-gc/kvcm-gc/backends/storage"
)

// load parses args (flags) with env as the environment.
func load(t *testing.T, args []string, env map[string]string) (Config, error) {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	return f.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kvcm-gc.yaml")
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

func TestDefaultsAreDesignDefaults(t *testing.T) {
	c := Default()
	require.NoError(t, c.Validate())
	require.True(t, c.Enabled)
	require.Equal(t, time.Second, c.Scanner.ScanInterval)
	require.Equal(t, 24*time.Hour, c.Scanner.RoundPause)
	require.Equal(t, 256, c.Scanner.ScanBatchSize)
	require.Equal(t, 24*time.Hour, c.Prober.OrphanWritingGrace)
	require.Equal(t, 2, c.MaxInflightDeletes)
	require.Zero(t, c.Deleter.DeleteDelay)
	require.Equal(t, 512, c.Prober.ProbeChunkSize)

	c.Cluster = "c1"
	_, _, err := c.Conns()
	require.NoError(t, err)
	_, pc, dc := c.StageConfigs()
	require.Equal(t, 2, c.Settings().DeleterMaxAckPending, "max_inflight_delete_requests is the deleter consumer's MaxAckPending")
	require.Equal(t, 2, c.DeleterWorkers(), "workers.deleter 0 follows max_inflight_delete_requests")
	require.Equal(t, c.Settings().DeleterAckWait, dc.AckWait)
	require.Equal(t, 256, pc.MaxTargets)
}

// TestExampleConfig loads the documented example and checks that it documents every key.
func TestExampleConfig(t *testing.T) {
	path := filepath.Join("..", "deploy", "kvcm-gc.example.yaml")
	c, err := load(t, []string{"--config", path}, nil)
	require.NoError(t, err)
	require.Equal(t, "kvcm-prod", c.Cluster)
	require.Equal(t, storage.ProbeStat, c.Storage.Overrides["nfs_01"].Probe)
	require.Equal(t, []PathMap{{From: "/mnt/kvcm/nfs_01/", To: "/data/nfs_01/"}}, c.Storage.Overrides["nfs_01"].PathMap)
	_, _, err = c.Conns()
	require.NoError(t, err)

	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var root yaml.Node
	require.NoError(t, yaml.Unmarshal(data, &root))
	present := map[string]bool{}
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		if n.Kind == yaml.DocumentNode {
			walk(n.Content[0], prefix)
			return
		}
		for i := 0; n.Kind == yaml.MappingNode && i+1 < len(n.Content); i += 2 {
			name := prefix + n.Content[i].Value
			present[name] = true
			if _, isKey := Lookup(name); !isKey {
				walk(n.Content[i+1], name+".")
			}
		}
	}
	walk(&root, "")
	for _, k := range Keys() {
		require.True(t, present[k.Name], "the example does not document %s", k.Name)
	}
}

func TestPrecedence(t *testing.T) {
	file := writeFile(t, "cluster: c1\nscan_interval: 5s\n")
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want time.Duration
	}{
		{"default", nil, nil, time.Second},
		{"file", []string{"--config", file}, nil, 5 * time.Second},
		{"file named by the environment", nil, map[string]string{FileEnv: file}, 5 * time.Second},
		{"environment over file", []string{"--config", file}, map[string]string{"KVCMGC_SCAN_INTERVAL": "6s"}, 6 * time.Second},
		{"empty environment is unset", []string{"--config", file}, map[string]string{"KVCMGC_SCAN_INTERVAL": ""}, 5 * time.Second},
		{"flag over environment", []string{"--config", file, "--scan_interval", "7s"}, map[string]string{"KVCMGC_SCAN_INTERVAL": "6s"}, 7 * time.Second},
		{"flag before --config still wins", []string{"--scan_interval=8s", "--config", file}, nil, 8 * time.Second},
		{"last flag wins", []string{"--scan_interval=8s", "--scan_interval=9s"}, nil, 9 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := load(t, tt.args, tt.env)
			require.NoError(t, err)
			require.Equal(t, tt.want, c.Scanner.ScanInterval)
		})
	}
}

func TestEveryKeyHasAFlagAndAVariable(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	AddFlags(fs)
	seen := map[string]bool{}
	for _, k := range Keys() {
		require.NotEmpty(t, k.Help, k.Name)
		require.NotNil(t, fs.Lookup(k.Flag()), k.Name)
		require.Equal(t, EnvPrefix+strings.ToUpper(strings.NewReplacer(".", "_").Replace(k.Name)), k.Env)
		require.False(t, seen[k.Env], "two keys share %s", k.Env)
		seen[k.Env] = true
	}
	for _, name := range []string{"enabled", "scan_interval", "round_pause", "scan_batch_size", "orphan_writing_grace",
		"max_inflight_delete_requests", "delete_delay", "probe_chunk_size", "nats.url", "nats.credentials_file",
		"nats.nkey_seed_file", "registry.uri", "storage.overrides", "dry_run", "http.listen"} {
		_, ok := Lookup(name)
		require.True(t, ok, name)
	}
}

func TestEveryKeySetsItsField(t *testing.T) {
	samples := map[string]string{"int": "7", "float": "2.5", "duration": "3h",
		"string": "x", "list": "file,pace", "map": "a=redis://h:1", "storage": "s.probe=stat"}
	for _, k := range Keys() {
		t.Run(k.Name, func(t *testing.T) {
			c := Default()
			before := k.Format(&c)
			sample := samples[k.Type]
			if k.Type == "bool" {
				sample = map[string]string{"true": "false", "false": "true"}[before]
			}
			require.NoError(t, k.Set(&c, sample))
			require.NotEqual(t, before, k.Format(&c), "setting %s changed nothing", k.Name)
		})
	}
}

func TestMapsAndLists(t *testing.T) {
	c, err := load(t, []string{
		"--cluster", "c1",
		"--meta.store_uris", "a:1=redis://a:1",
		"--meta.store_uris", "b:1=rediss://b:2?timeout_ms=5,c:1=redis://c:3",
		"--storage.overrides", "nfs.probe=stat,nfs.delete=false",
		"--storage.overrides", "nfs.path_map=/m/=/d/",
		"--storage.overrides", "nfs.path_map=/n/=/e/",
		"--storage.overrides", "dotted.name.probe=none",
		"--excluded_storage_types", "mooncake,pace",
	}, map[string]string{"KVCMGC_META_STORE_URIS": "a:1=redis://env:1,z:1=redis://z:1"})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"a:1": "redis://a:1", "b:1": "rediss://b:2?timeout_ms=5",
		"c:1": "redis://c:3", "z:1": "redis://z:1"}, c.Meta.StoreURIs)
	off := false
	require.Equal(t, StorageOverride{Probe: "stat", Delete: &off, PathMap: []PathMap{{"/m/", "/d/"}, {"/n/", "/e/"}}}, c.Storage.Overrides["nfs"])
	require.Equal(t, "none", c.Storage.Overrides["dotted.name"].Probe)
	require.Equal(t, []string{"mooncake", "pace"}, c.Prober.ExcludedTypes)

	// A path_map from a flag replaces the file's for that storage; other fields merge.
	file := writeFile(t, "cluster: c1\nstorage:\n  overrides:\n    nfs:\n      probe: stat\n      path_map: [{from: /a/, to: /b/}]\n")
	c, err = load(t, []string{"--config", file, "--storage.overrides", "nfs.path_map=/x/=/y/"}, nil)
	require.NoError(t, err)
	require.Equal(t, StorageOverride{Probe: "stat", PathMap: []PathMap{{"/x/", "/y/"}}}, c.Storage.Overrides["nfs"])
}

func TestClusterFromRegistryURI(t *testing.T) {
	c, err := load(t, []string{"--registry.uri", "redis://r:6379?cluster_name=prod"}, nil)
	require.NoError(t, err)
	require.Equal(t, "prod", c.Cluster)
	require.NoError(t, c.Require(Needs{Registry: true}))
	require.ErrorContains(t, c.Require(Needs{NATS: true}), "nats.url: required")
}

func TestInvalid(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		file string // YAML, written to a file when not empty
		args []string
		env  map[string]string
		want string // in the error
	}{
		{name: "grace under an hour", args: []string{"--orphan_writing_grace", "59m"}, want: "orphan_writing_grace: must be >= 1h0m0s"},
		{name: "grace under an hour in the file", file: "orphan_writing_grace: 30m\n", want: "orphan_writing_grace"},
		{name: "unregistered grace under a day", args: []string{"--collect_unregistered_instances", "--unregistered_grace", "23h"},
			want: "unregistered_grace: must be >= 24h0m0s"},
		{name: "no cap on unregistered keys", file: "collect_unregistered_instances: true\nunregistered_max_keys_per_round: 0\n",
			want: "unregistered_max_keys_per_round: must be > 0"},
		{name: "zero batch size", env: map[string]string{"KVCMGC_SCAN_BATCH_SIZE": "0"}, want: "scan_batch_size: must be > 0"},
		{name: "chunk above 512", file: "probe_chunk_size: 513\n", want: "probe_chunk_size: must be in 1..512"},
		{name: "zero in-flight deletes", args: []string{"--max_inflight_delete_requests=0"}, want: "max_inflight_delete_requests"},
		{name: "unknown key", file: "scan_intervall: 1s\n", want: "scan_intervall (line 1): unknown key"},
		{name: "unknown nested key", file: "nats:\n  url: nats://n:4222\n  pasword: x\n", want: "nats.pasword (line 3): unknown key"},
		{name: "unknown override field", file: "storage:\n  overrides:\n    nfs:\n      prob: stat\n", want: "storage.overrides.nfs.prob (line 4): unknown key"},
		{name: "bad duration in the file", file: "\nround_pause: soon\n", want: "round_pause (line 2)"},
		{name: "duration without unit in the file", file: "delete_delay: 5\n", want: "delete_delay (line 1)"},
		{name: "bad duration in the environment", env: map[string]string{"KVCMGC_DELETE_DELAY": "5"}, want: "KVCMGC_DELETE_DELAY: delete_delay: \"5\" is not a duration"},
		{name: "bad duration flag", args: []string{"--scan_interval", "fast"}, want: "-scan_interval"},
		{name: "wrong type in the file", file: "scan_batch_size: many\n", want: "scan_batch_size (line 1)"},
		{name: "two documents", file: "cluster: a\n---\ncluster: b\n", want: "more than one YAML document"},
		{name: "unreadable file", args: []string{"--config", filepath.Join(dir, "missing.yaml")}, want: "load config " + filepath.Join(dir, "missing.yaml")},
		{name: "bad registry uri", args: []string{"--registry.uri", "http://user:hunter2@r:1"}, want: "registry.uri"},
		{name: "bad store uri", args: []string{"--meta.store_uris", "s=redis://h:notaport"}, want: "meta.store_uris: s"},
		{name: "map entry without name", args: []string{"--meta.store_uris", "redis://h:1"}, want: "not name=value"},
		{name: "bad nats url", args: []string{"--nats.url", "http://n:4222"}, want: "nats.url"},
		{name: "unreadable credentials", args: []string{"--nats.credentials_file", filepath.Join(dir, "nope.creds")}, want: "nats.credentials_file"},
		{name: "unreadable nkey seed", env: map[string]string{"KVCMGC_NATS_NKEY_SEED_FILE": filepath.Join(dir, "nope.nk")}, want: "nats.nkey_seed_file"},
		{name: "exclusive nats auth", args: []string{"--nats.user", "u", "--nats.nkey_seed_file", writeFile(t, "SU")}, want: "exclusive"},
		{name: "unreadable redis ca", args: []string{"--registry.tls.ca_file", filepath.Join(dir, "ca.pem")}, want: "registry.tls.ca_file"},
		{name: "bad probe", args: []string{"--storage.default_probe", "ls"}, want: "storage.default_probe"},
		{name: "bad override probe", args: []string{"--storage.overrides", "nfs.probe=ls"}, want: "storage.overrides"},
		{name: "relative path map", args: []string{"--storage.overrides", "nfs.path_map=a/=/b/"}, want: "path_map"},
		{name: "bad guard", args: []string{"--guard.kind", "etcd"}, want: "guard.kind"},
		{name: "bad log level", env: map[string]string{"KVCMGC_LOG_LEVEL": "loud"}, want: "log.level"},
		{name: "bad listen", args: []string{"--http.listen", "9090"}, want: "http.listen"},
		{name: "bad replicas", args: []string{"--jetstream.replicas", "7"}, want: "jetstream.replicas"},
		{name: "short lease", args: []string{"--jetstream.lease_ttl", "1ms"}, want: "jetstream.lease_ttl"},
		{name: "bad storage type", args: []string{"--excluded_storage_types", "tape"}, want: "excluded_storage_types"},
		{name: "bad bool", env: map[string]string{"KVCMGC_DRY_RUN": "perhaps"}, want: "KVCMGC_DRY_RUN: dry_run"},
		{name: "bad prefix", args: []string{"--subject_prefix", "a b"}, want: "subject_prefix"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if tt.file != "" {
				args = append([]string{"--config", writeFile(t, tt.file)}, args...)
			}
			_, err := load(t, args, tt.env)
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.want)
			require.NotContains(t, err.Error(), "hunter2")
		})
	}
}

// TestSecretsNeverPrinted: neither the config dump, the help, nor the startup log line shows a
// password or a URI's credentials.
func TestSecretsNeverPrinted(t *testing.T) {
	secrets := []string{"regpw", "metapw", "natspw", "uripw", "storepw", "natsuripw", "guardpw"}
	// A store URI's userinfo and meta's ACL user exclude each other, so the two are shown by
	// two configurations.
	const common = `
cluster: c1
registry: {uri: "redis://u:uripw@r:6379"}
guard: {kind: redis, uri: "redis://:guardpw@g:1"}
nats: {url: "nats://a:natsuripw@n:4222", user: a, password: natspw}
`
	withUser := writeFile(t, common+`meta: {username: gc, password: metapw, store_uris: {"s:1": "redis://s:1"}}`+"\n")
	withURI := writeFile(t, common+`meta: {store_uris: {"s:1": "redis://x:storepw@s:1"}}`+"\n")
	both := writeFile(t, common+`meta: {username: gc, password: metapw, store_uris: {"s:1": "redis://x:storepw@s:1"}}`+"\n")

	env := map[string]string{"KVCMGC_REGISTRY_PASSWORD": "regpw"}
	_, err := load(t, []string{"--config", both}, env)
	require.ErrorContains(t, err, "exclusive with a userinfo", "registry password and URI userinfo together")
	require.ErrorContains(t, err, "meta.store_uris: s:1: a userinfo in the uri is exclusive with meta.username",
		"a store URI's userinfo would sign in instead of meta.username")
	for _, s := range secrets {
		require.NotContains(t, err.Error(), s)
	}

	var out bytes.Buffer
	var c Config
	for _, file := range []string{withUser, withURI} {
		c, err = load(t, []string{"--config", file, "--registry.uri", "redis://r:6379"}, env)
		require.NoError(t, err)
		require.Equal(t, "regpw", c.Registry.Password)
		require.NoError(t, c.Print(&out))
		reg, guardConn, err := c.Conns()
		require.NoError(t, err)
		out.WriteString(reg.String() + guardConn.String())
		for _, k := range Keys() {
			out.WriteString(k.Format(&c))
		}
	}
	WriteHelp(&out)
	require.Contains(t, out.String(), "***")
	require.Contains(t, out.String(), "gc")
	for _, s := range secrets {
		require.NotContains(t, out.String(), s)
	}
	// The original is untouched by redaction.
	require.Equal(t, "redis://x:storepw@s:1", c.Meta.StoreURIs["s:1"])
}

func TestPrintRoundTrips(t *testing.T) {
	c, err := load(t, []string{"--cluster", "c1", "--storage.overrides", "nfs.probe=stat,nfs.path_map=/a/=/b/", "--delete_delay", "2s"}, nil)
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, c.Print(&out))
	back, err := load(t, []string{"--config", writeFile(t, out.String())}, nil)
	require.NoError(t, err)
	for _, k := range Keys() {
		require.Equal(t, k.Format(&c), k.Format(&back), k.Name)
	}
}

// TestReadmeListsEveryKey keeps the README's key table in step with Config.
func TestReadmeListsEveryKey(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	for _, k := range Keys() {
		require.Contains(t, string(data), "| `"+k.Name+"` | `"+k.Env+"` |", "README.md does not list %s", k.Name)
	}
}

// TestEverySecretHasAFile: every secret given whole (a password, a token) can also come from
// a file, so it need not show in a flag (ps), a variable or the configuration file.
func TestEverySecretHasAFile(t *testing.T) {
	files := map[string]string{} // secret key -> its file key
	for _, k := range Keys() {
		if k.FileOf != "" {
			v, ok := Lookup(k.FileOf)
			require.True(t, ok, "%s names %s", k.Name, k.FileOf)
			require.Equal(t, "true", v.Secret, "%s holds a secret", v.Name)
			require.Equal(t, v.Name+"_file", k.Name)
			require.Empty(t, k.Secret, "a file's name is no secret")
			files[k.FileOf] = k.Name
		}
	}
	for _, k := range Keys() {
		if k.Secret == "true" {
			require.Contains(t, files, k.Name, "%s has no _file key", k.Name)
		}
	}
	require.Len(t, files, 5) // registry, meta, guard, nats passwords; nats token
}

// TestSecretFiles: each secret's _file key fills it from the file, one trailing newline
// dropped; the value never shows in --print-config, the help or the startup log line; a
// secret given both ways, an unreadable file or an empty one stops the start, naming the keys.
func TestSecretFiles(t *testing.T) {
	dir := t.TempDir()
	secret := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	reg, meta, guard := secret("reg", "reg-s3cret\n"), secret("meta", "meta-s3cret\r\n"), secret("guard", "guard-s3cret")
	natsPW, token := secret("natspw", "nats-s3cret\n\n"), secret("token", "tok-s3cret\n")
	file := writeFile(t, "cluster: c1\nregistry: {uri: \"redis://r:6379\", username: gc, password_file: "+reg+"}\n"+
		"guard: {kind: redis, uri: \"redis://g:1\", username: guard, password_file: "+guard+"}\n")
	c, err := load(t, []string{"--config", file, "--nats.user", "n", "--nats.password_file", natsPW},
		map[string]string{"KVCMGC_META_PASSWORD_FILE": meta})
	require.NoError(t, err)
	require.Equal(t, "reg-s3cret", c.Registry.Password)
	require.Equal(t, "meta-s3cret", c.Meta.Password, "a CRLF goes too")
	require.Equal(t, "guard-s3cret", c.Guard.Password, "no newline: nothing dropped")
	require.Equal(t, "nats-s3cret\n", c.NATS.Password, "one newline only")
	regConn, guardConn, err := c.Conns()
	require.NoError(t, err)
	require.Equal(t, "reg-s3cret", regConn.Password)
	require.Equal(t, "guard", guardConn.Username)
	require.Equal(t, "guard-s3cret", guardConn.Password)

	ct, err := load(t, []string{"--cluster", "c1", "--nats.token_file", token}, nil)
	require.NoError(t, err)
	require.Equal(t, "tok-s3cret", ct.NATS.Token)

	var out bytes.Buffer
	require.NoError(t, c.Print(&out))
	require.NoError(t, ct.Print(&out))
	WriteHelp(&out)
	slog.New(slog.NewTextHandler(&out, nil)).Info("starting", "config", c)
	require.Contains(t, out.String(), "password_file: "+reg, "the file's name is shown")
	require.NotContains(t, out.String(), "s3cret")

	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"both a password and its file", []string{"--registry.password", "x", "--registry.password_file", reg}, nil,
			"registry.password, registry.password_file: both set"},
		{"both, from the environment and a flag", []string{"--nats.token", "x"}, map[string]string{"KVCMGC_NATS_TOKEN_FILE": token},
			"nats.token, nats.token_file: both set"},
		{"unreadable file", []string{"--meta.password_file", filepath.Join(dir, "missing")}, nil,
			"meta.password_file: open " + filepath.Join(dir, "missing")},
		{"empty file", []string{"--nats.user", "n", "--nats.password_file", secret("empty", "\n")}, nil,
			"nats.password_file: " + filepath.Join(dir, "empty") + " is empty"},
		{"token and user", []string{"--nats.user", "n", "--nats.token_file", token}, nil,
			"credentials_file, nkey_seed_file, user and token are exclusive"},
		{"guard credentials without guard.uri", []string{"--guard.kind", "redis", "--guard.password_file", guard}, nil,
			"guard.username, guard.password: given without guard.uri"},
		{"guard credentials and a userinfo", []string{"--guard.kind", "redis", "--guard.uri", "redis://:x@g:1", "--guard.password_file", guard}, nil,
			"guard.username, guard.password: exclusive with a userinfo in guard.uri"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, append([]string{"--cluster", "c1"}, tc.args...), tc.env)
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), "s3cret")
		})
	}
}
