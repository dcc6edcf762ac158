// Package config is kvcm-gc's configuration: one YAML file whose every key is also a
// command-line flag and an environment variable, with the precedence flag > environment >
// file > default. The Config struct is the single source of truth: its yaml tags name the
// keys, its help tags document them, and Keys derives the flag and variable names from it, so
// a key cannot exist in one form and be missing in another.
//
// Each component owns its keys: the stages' config structs (scanner.Config, prober.Config,
// deleter.Config, sweep.Config) carry their yaml and help tags, defaults and Validate, and
// Config takes them inline; the topology's subjects.Settings are the keys under jetstream:.
// Config keeps the keys of the process (connections, workers, HTTP, log) and wires the few
// values one component reads from another's keys (Settings, StageConfigs, SweepConfig).
package config

import (
	"time"

	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/pipeline/deleter"
	"github.com/kvcm-gc/kvcm-gc/pipeline/prober"
	"github.com/kvcm-gc/kvcm-gc/pipeline/scanner"
	"github.com/kvcm-gc/kvcm-gc/pipeline/sweep"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// Config is the whole configuration of a kvcm-gc process. A process reads all of it and uses
// what its stages need, so one file can serve every stage of a deployment.
//
// Tags: yaml names the key (nested structs make dotted keys, e.g. nats.url), help documents it
// for --help, secret marks a value never to print ("true" hides it whole, "uri" hides the
// credentials inside a URI), and file marks the key naming a file that holds the value of the
// sibling key it names (password_file for password): see ReadSecretFiles.
type Config struct {
	Enabled bool   `yaml:"enabled" help:"run the stages; false keeps the process up serving /healthz and /metrics only"`
	DryRun  bool   `yaml:"dry_run" help:"judge and report everything, write nothing (the Redis writer and storage deleter refuse every write)"`
	Cluster string `yaml:"cluster" help:"KVCM cluster name (registry keys kvcache_registry:<cluster>:…); empty takes the cluster_name parameter of registry.uri"`
	Prefix  string `yaml:"subject_prefix" help:"first tokens of every NATS subject, so several deployments can share a NATS server"`

	// The stages' keys, owned by their packages (DESIGN §4–§7): their yaml and help tags.
	Scanner            scanner.Config `yaml:",inline"`
	Prober             prober.Config  `yaml:",inline"`
	MaxInflightDeletes int            `yaml:"max_inflight_delete_requests" help:"delete requests in flight across all deleters (the deleter consumer's MaxAckPending)"`
	Deleter            deleter.Config `yaml:",inline"`
	EmptyBlock         string         `yaml:"empty_block" help:"when a block's last location goes: keep (the key stays as KVCM reads 'exists, no location', so KVCM's key count stays right) or delete (DEL the key; KVCM still counts it)"`
	// Sweep of orphan data files (DESIGN §7), on the storages whose override sets sweep.
	Sweep            sweep.Config `yaml:",inline"`
	MaxInflightSweep int          `yaml:"max_inflight_sweep_batches" help:"sweep batches in flight across all sweepers (the sweeper consumer's MaxAckPending)"`

	Workers  Workers           `yaml:"workers"`
	Registry RedisConn         `yaml:"registry"`
	Meta     MetaConn          `yaml:"meta"`
	Storage  StorageConfig     `yaml:"storage"`
	Guard    GuardConfig       `yaml:"guard"`
	NATS     NATSConfig        `yaml:"nats"`
	JS       subjects.Settings `yaml:"jetstream"`
	HTTP     HTTPConfig        `yaml:"http"`
	Log      LogConfig         `yaml:"log"`
}

// Workers are the concurrent message handlers of a process.
type Workers struct {
	Prober  int `yaml:"prober" help:"batches judged concurrently by this process"`
	Deleter int `yaml:"deleter" help:"delete requests handled concurrently by this process (0: max_inflight_delete_requests)"`
	Sweeper int `yaml:"sweeper" help:"sweep batches handled concurrently by this process (0: max_inflight_sweep_batches)"`
}

// RedisTLS is the TLS material of a Redis connection. TLS itself is on for rediss:// URIs.
// KVCM writes redis:// store URIs into its registry; to reach a store through TLS, give it a
// rediss:// URI in meta.store_uris.
type RedisTLS struct {
	CAFile     string `yaml:"ca_file" help:"PEM bundle of CAs to trust (empty: the system roots)"`
	CertFile   string `yaml:"cert_file" help:"PEM client certificate, for servers that require one"`
	KeyFile    string `yaml:"key_file" help:"PEM key of cert_file"`
	ServerName string `yaml:"server_name" help:"name checked in the server certificate (empty: the host)"`
}

// RedisConn is the connection to KVCM's registry Redis.
type RedisConn struct {
	URI      string `yaml:"uri" secret:"uri" help:"KVCM's registry Redis, redis[s]://[userinfo@]host:port[?timeout_ms=…]; userinfo authenticates as KVCM does"`
	Username string `yaml:"username" help:"ACL user of kvcm-gc's own (exclusive with a URI userinfo)"`
	Password string `yaml:"password" secret:"true" help:"password of username (or of the default user)"`
	// PasswordFile holds the password (a mounted secret), so it shows in no flag, variable
	// or file of the configuration.
	PasswordFile string   `yaml:"password_file" file:"password" help:"file holding the password (one trailing newline is dropped); exclusive with password"`
	TLS          RedisTLS `yaml:"tls"`
}

// MetaConn are the metadata stores: the connection defaults and the URI overrides.
type MetaConn struct {
	Username     string   `yaml:"username" help:"ACL user for every metadata store, also those whose registry URI holds KVCM's credentials (exclusive with a userinfo in meta.store_uris)"`
	Password     string   `yaml:"password" secret:"true" help:"password of username (or of the default user)"`
	PasswordFile string   `yaml:"password_file" file:"password" help:"file holding the password (one trailing newline is dropped); exclusive with password"`
	TLS          RedisTLS `yaml:"tls"`
	// StoreURIs and GroupStoreURIs override what the registry says.
	StoreURIs      map[string]string `yaml:"store_uris" secret:"uri" help:"URI by metadata store name (host:port as in the registry), to reach a store another way"`
	GroupStoreURIs map[string]string `yaml:"group_store_uris" secret:"uri" help:"URI by instance group name, replacing the group's meta_storage_backend_config.storage_uri"`
}

// StorageConfig are the local settings of the storage backends.
type StorageConfig struct {
	DefaultProbe string                     `yaml:"default_probe" help:"probe of file storages without an override: none (KVCM's own: data always exists) or stat"`
	Overrides    map[string]StorageOverride `yaml:"overrides" help:"by storage name: probe (none|stat), delete (true|false: physical deletes), path_map ([{from, to}] prefix remaps), sweep (true: remove its orphan data files)"`
}

// StorageOverride is the local configuration of one storage.
type StorageOverride struct {
	PathMap []PathMap `yaml:"path_map,omitempty"`
	Probe   string    `yaml:"probe,omitempty"`
	// Delete nil means on.
	Delete *bool `yaml:"delete,omitempty"`
	// Sweep opts the storage into the sweep of orphan data files (file and hf3fs storages).
	Sweep bool `yaml:"sweep,omitempty"`
}

// PathMap replaces the URI path prefix From with the local path To.
type PathMap struct {
	From string `yaml:"from"`
	To   string `yaml:"to"`
}

// GuardConfig selects the migration copy-target guard.
type GuardConfig struct {
	Kind   string `yaml:"kind" help:"none, or redis: hashes <prefix><instance> list copy targets that must never be collected"`
	Prefix string `yaml:"prefix" help:"key prefix of the redis guard's hashes"`
	URI    string `yaml:"uri" secret:"uri" help:"Redis of the guard (empty: the registry connection)"`
	// Username and Password sign in to guard.uri's Redis, as registry.username does to the
	// registry's; without guard.uri the guard uses the registry connection and its credentials.
	Username     string `yaml:"username" help:"ACL user on guard.uri's Redis (exclusive with a URI userinfo)"`
	Password     string `yaml:"password" secret:"true" help:"password of username on guard.uri's Redis (or of the default user)"`
	PasswordFile string `yaml:"password_file" file:"password" help:"file holding the password (one trailing newline is dropped); exclusive with password"`
}

// NATSConfig is the connection to NATS, and the embedded server of the run command.
type NATSConfig struct {
	URL             string        `yaml:"url" secret:"uri" help:"NATS server(s), comma-separated (nats://, tls://); the run command starts an embedded server when empty"`
	CredentialsFile string        `yaml:"credentials_file" help:"NATS credentials file (JWT and nkey seed)"`
	NkeySeedFile    string        `yaml:"nkey_seed_file" help:"file holding an nkey seed to sign in with"`
	User            string        `yaml:"user" help:"user name"`
	Password        string        `yaml:"password" secret:"true" help:"password of user"`
	PasswordFile    string        `yaml:"password_file" file:"password" help:"file holding the password of user (one trailing newline is dropped); exclusive with password"`
	Token           string        `yaml:"token" secret:"true" help:"authentication token (the server's authorization token)"`
	TokenFile       string        `yaml:"token_file" file:"token" help:"file holding the token (one trailing newline is dropped); exclusive with token"`
	Name            string        `yaml:"name" help:"connection name shown by the server (empty: kvcm-gc-<command>)"`
	InboxPrefix     string        `yaml:"inbox_prefix" help:"subject prefix of the connection's reply inbox (empty: _INBOX.<subject_prefix>.<cluster>.<stage>, admin for the operator's commands, _INBOX for a process of several stages); the identity's NATS user may subscribe to it only"`
	TLS             NATSTLS       `yaml:"tls"`
	Embedded        EmbeddedJS    `yaml:"embedded"`
	ConnectTimeout  time.Duration `yaml:"connect_timeout" help:"how long startup waits for the NATS server to accept the connection"`
}

// NATSTLS is the TLS material of the NATS connection.
type NATSTLS struct {
	CAFile   string `yaml:"ca_file" help:"PEM bundle of CAs to trust"`
	CertFile string `yaml:"cert_file" help:"PEM client certificate"`
	KeyFile  string `yaml:"key_file" help:"PEM key of cert_file"`
}

// EmbeddedJS is the NATS JetStream server the run command starts when nats.url is empty.
type EmbeddedJS struct {
	StoreDir string `yaml:"store_dir" help:"JetStream file store directory of the embedded server (run)"`
	Listen   string `yaml:"listen" help:"host:port the embedded server listens on, for other processes and the nats CLI (run; port 0: any)"`
}

// HTTPConfig is the process's HTTP endpoint.
type HTTPConfig struct {
	Listen string `yaml:"listen" help:"host:port of /metrics, /healthz and /readyz (empty: no HTTP server; port 0: any)"`
}

// LogConfig is the process's log.
type LogConfig struct {
	Level  string `yaml:"level" help:"debug, info, warn or error"`
	Format string `yaml:"format" help:"text or json"`
}

// Default returns the configuration used for every key nobody sets: DESIGN §9's defaults.
func Default() Config {
	js := subjects.DefaultSettings()
	return Config{
		Enabled:            true,
		Prefix:             "kvcmgc",
		Scanner:            scanner.DefaultConfig(),
		Prober:             prober.DefaultConfig(),
		MaxInflightDeletes: js.DeleterMaxAckPending,
		Deleter:            deleter.DefaultConfig(),
		EmptyBlock:         "keep",
		Sweep:              sweep.DefaultConfig(),
		MaxInflightSweep:   js.SweeperMaxAckPending,
		Workers:            Workers{Prober: 4},
		Storage:            StorageConfig{DefaultProbe: storage.ProbeNone},
		Guard:              GuardConfig{Kind: "none", Prefix: "kvcm_gc:copy:"},
		NATS: NATSConfig{
			ConnectTimeout: 10 * time.Second,
			Embedded:       EmbeddedJS{StoreDir: "kvcm-gc-jetstream", Listen: "127.0.0.1:4222"},
		},
		JS:   js,
		HTTP: HTTPConfig{Listen: ":9090"},
		Log:  LogConfig{Level: "info", Format: "text"},
	}
}
