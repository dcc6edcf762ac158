package config

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"

	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/pipeline/scanner"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// unjoin lists the errors errors.Join made err of (err itself when it is not joined).
func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// Validate checks every key that does not depend on what the process runs; Require checks
// the rest. Every error starts with the key at fault; all of them are reported at once.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, a...)))
	}
	if err := (subjects.Names{Prefix: c.Prefix, Cluster: "x"}).Validate(); err != nil {
		bad("subject_prefix", "%q must be tokens of [A-Za-z0-9_-] joined by '.'", c.Prefix)
	}
	if p := c.NATS.InboxPrefix; p != "" && (subjects.Names{Prefix: p, Cluster: "x"}).Validate() != nil {
		// A subject without wildcards, and no trailing dot (the client adds one).
		bad("nats.inbox_prefix", "%q must be tokens of [A-Za-z0-9_-] joined by '.'", p)
	}

	// The stages' own keys, each checked by its owner.
	errs = append(errs, unjoin(c.Scanner.Validate())...)
	errs = append(errs, unjoin(c.Prober.Validate())...)
	errs = append(errs, unjoin(c.Deleter.Validate())...)
	errs = append(errs, unjoin(c.Sweep.Validate())...)
	if c.Scanner.CollectUnregistered && c.Scanner.UnregisteredGrace < scanner.MinUnregisteredGrace {
		// An instance KVCM is removing is absent from the registry while its trim runs; a
		// registry restored from an old backup lists fewer instances for a while. The
		// scanner itself takes less (a test's seconds).
		bad("unregistered_grace", "must be >= %s, got %s", scanner.MinUnregisteredGrace, c.Scanner.UnregisteredGrace)
	}
	if c.EmptyBlock != "keep" && c.EmptyBlock != "delete" {
		bad("empty_block", "must be keep or delete, got %q", c.EmptyBlock)
	}
	if c.Workers.Sweeper < 0 {
		bad("workers.sweeper", "must be >= 0, got %d", c.Workers.Sweeper)
	}
	for _, name := range slices.Sorted(maps.Keys(c.Storage.Overrides)) {
		if o := c.Storage.Overrides[name]; o.Sweep && o.Delete != nil && !*o.Delete {
			bad("storage.overrides", "%s: sweep needs physical deletes, and delete is false", name)
		}
	}
	if c.Workers.Prober < 1 {
		bad("workers.prober", "must be >= 1, got %d", c.Workers.Prober)
	}
	if c.Workers.Deleter < 0 {
		bad("workers.deleter", "must be >= 0, got %d", c.Workers.Deleter)
	}

	if c.Registry.URI != "" {
		if _, err := c.RegistryConn(); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, checkRedisTLS("registry.tls", c.Registry.TLS)...)
	errs = append(errs, checkRedisTLS("meta.tls", c.Meta.TLS)...)
	for _, key := range []struct {
		name string
		m    map[string]string
	}{{"meta.store_uris", c.Meta.StoreURIs}, {"meta.group_store_uris", c.Meta.GroupStoreURIs}} {
		for _, name := range slices.Sorted(maps.Keys(key.m)) {
			conn, err := c.MetaConn().ApplyURI(key.m[name])
			switch {
			case err != nil:
				bad(key.name, "%s: %v", name, err)
			case conn.UserInfo != "" && (c.Meta.Username != "" || c.Meta.Password != ""):
				// A userinfo would sign in instead of meta.username: the stage's least privilege,
				// lost without a word.
				bad(key.name, "%s: a userinfo in the uri is exclusive with meta.username and meta.password", name)
			}
		}
	}

	if !slices.Contains([]string{storage.ProbeNone, storage.ProbeStat}, c.Storage.DefaultProbe) {
		bad("storage.default_probe", "%q is not none or stat", c.Storage.DefaultProbe)
	}
	// With no registry storages, NewSet checks what does not depend on the storage type:
	// probe modes and the shape of every path map.
	if _, err := storage.NewSet(nil, c.StorageOptions()); err != nil {
		bad("storage.overrides", "%v", err)
	}

	switch c.Guard.Kind {
	case "none":
	case "redis":
		if c.Guard.Prefix == "" {
			bad("guard.prefix", "must not be empty with guard.kind redis")
		}
		if c.Guard.URI != "" {
			if _, err := c.GuardConn(); err != nil {
				errs = append(errs, err)
			}
		}
	default:
		bad("guard.kind", "%q is not none or redis", c.Guard.Kind)
	}
	if c.Guard.URI == "" && (c.Guard.Username != "" || c.Guard.Password != "") {
		bad("guard.username, guard.password", "given without guard.uri (the guard then uses the registry connection)")
	}

	errs = append(errs, c.checkNATS()...)
	// The jetstream: keys and the consumers' caps (max_inflight_*), checked by the topology.
	errs = append(errs, unjoin(c.Settings().Validate())...)

	if c.HTTP.Listen != "" {
		if err := checkListen(c.HTTP.Listen); err != nil {
			bad("http.listen", "%v", err)
		}
	}
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, c.Log.Level) {
		bad("log.level", "%q is not debug, info, warn or error", c.Log.Level)
	}
	if !slices.Contains([]string{"text", "json"}, c.Log.Format) {
		bad("log.format", "%q is not text or json", c.Log.Format)
	}
	return errors.Join(errs...)
}

func (c Config) checkNATS() []error {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, a...)))
	}
	n := c.NATS
	for _, raw := range splitList(n.URL) {
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" || !slices.Contains([]string{"nats", "tls", "ws", "wss"}, u.Scheme) {
			bad("nats.url", "%q is not a nats://, tls://, ws:// or wss:// URL with a host", redismeta.Redact(raw))
		}
	}
	auth := 0
	for _, a := range []string{n.CredentialsFile, n.NkeySeedFile, n.User, n.Token} {
		if a != "" {
			auth++
		}
	}
	if auth > 1 {
		bad("nats", "credentials_file, nkey_seed_file, user and token are exclusive")
	}
	if n.Password != "" && n.User == "" {
		bad("nats.password", "given without nats.user")
	}
	errs = append(errs, checkFile("nats.credentials_file", n.CredentialsFile)...)
	errs = append(errs, checkFile("nats.nkey_seed_file", n.NkeySeedFile)...)
	errs = append(errs, checkFile("nats.tls.ca_file", n.TLS.CAFile)...)
	errs = append(errs, checkFile("nats.tls.cert_file", n.TLS.CertFile)...)
	errs = append(errs, checkFile("nats.tls.key_file", n.TLS.KeyFile)...)
	if (n.TLS.CertFile == "") != (n.TLS.KeyFile == "") {
		bad("nats.tls", "cert_file and key_file must be given together")
	}
	if n.ConnectTimeout <= 0 {
		bad("nats.connect_timeout", "must be > 0, got %s", n.ConnectTimeout)
	}
	if err := checkListen(n.Embedded.Listen); err != nil {
		bad("nats.embedded.listen", "%v", err)
	}
	return errs
}

func checkRedisTLS(key string, t RedisTLS) []error {
	errs := checkFile(key+".ca_file", t.CAFile)
	errs = append(errs, checkFile(key+".cert_file", t.CertFile)...)
	errs = append(errs, checkFile(key+".key_file", t.KeyFile)...)
	if (t.CertFile == "") != (t.KeyFile == "") {
		errs = append(errs, fmt.Errorf("%s: cert_file and key_file must be given together", key))
	}
	return errs
}

// checkFile fails on a file that is named but cannot be read, at startup rather than at the
// first reconnect.
func checkFile(key, path string) []error {
	if path == "" {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return []error{fmt.Errorf("%s: %w", key, err)}
	}
	_ = f.Close()
	return nil
}

func checkListen(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", addr, err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n > 65535 {
		return fmt.Errorf("%q: port %q is not a number in 0..65535", addr, port)
	}
	return nil
}

// Needs are what a command requires beyond Validate.
type Needs struct {
	Registry bool // scanner, prober: registry.uri and the cluster
	NATS     bool // nats.url (the run command's embedded server makes it optional)
}

// Require checks the keys a command cannot run without.
func (c Config) Require(n Needs) error {
	var errs []error
	if c.Cluster == "" {
		errs = append(errs, errors.New("cluster: required (or a cluster_name parameter in registry.uri)"))
	}
	if n.Registry && c.Registry.URI == "" {
		errs = append(errs, errors.New("registry.uri: required by the scanner, the prober, the walker and the sweeper"))
	}
	if n.NATS && c.NATS.URL == "" {
		errs = append(errs, errors.New("nats.url: required"))
	}
	return errors.Join(errs...)
}
