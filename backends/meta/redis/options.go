package redismeta

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// KVCM's connection defaults (common/redis_client.cc), kept so a URI copied from KVCM's
// configuration behaves the same under kvcm-gc.
const (
	DefaultTimeout     = 2000 * time.Millisecond
	DefaultPoolTimeout = 1000 * time.Millisecond
	DefaultRetryCount  = 2
	DefaultMaxPoolSize = 16
	// DefaultPort is used when one of kvcm-gc's own URIs names no port (ApplyURI). KVCM
	// itself would dial port 0 and fail, so a registry URI without a port is refused
	// (ApplyKVCMURI).
	DefaultPort = 6379
	// MaxPoolSizeLimit caps MaxPoolSize: go-redis sizes its pool's bookkeeping by it up front.
	MaxPoolSizeLimit = 1 << 16
)

// KVCMURIPrefix marks a URI taken from KVCM's registry: "kvcm+" followed by the URI as the
// registry holds it ("kvcm+redis://u:pa/ss@h:6379"). Pool reads such a URI with
// ApplyKVCMURI, any other with ApplyURI; RegistryReader hands registry URIs to Learn with it.
// KVCM never reads a URI's scheme, so the prefix takes nothing away.
const KVCMURIPrefix = "kvcm+"

// ErrBadURI: a Redis URI could not be parsed. The message never holds credentials.
var ErrBadURI = errors.New("bad redis uri")

// ConnOptions say how to reach and authenticate to one Redis server. The zero value of a
// numeric field means its default. String, GoString and LogValue redact the credentials, so
// printing or logging ConnOptions never leaks them.
type ConnOptions struct {
	// Addr is "host:port".
	Addr string
	// DB is the database, selected with SELECT when > 0: the "db" URI parameter, which KVCM
	// uses since it learned it (8145bfa). KVCM of the legacy layout (f6aa2b2) ignores it and
	// always uses DB 0, so what kvcm-gc reads from another database is not that KVCM's.
	DB int

	// UserInfo is KVCM-style authentication: the raw userinfo of a redis:// URI ("user:pw"),
	// sent as the single argument of AUTH, and only after PING answered NOAUTH. With Redis
	// that means "user:pw" is the default user's password (CONFIG SET requirepass "user:pw").
	// It excludes Username and Password.
	UserInfo string
	// Username and Password are ordinary ACL credentials (HELLO … AUTH at connect), meant for
	// kvcm-gc's own users, for example a read-only user for the scanner. An empty Username
	// with a Password authenticates the default user.
	Username string
	Password string

	// TLS is used when TLS.Enabled: a rediss:// URI of kvcm-gc's own enables it (ApplyURI);
	// a URI from KVCM's registry keeps it as it is (ApplyKVCMURI), since KVCM itself speaks
	// plain TCP whatever the scheme.
	TLS TLSOptions

	// Timeout bounds dialing and each read and write (URI timeout_ms). Default 2s.
	Timeout time.Duration
	// PoolTimeout bounds the wait for a free pooled connection. Default 1s.
	PoolTimeout time.Duration
	// RetryCount is the number of attempts of a command that failed on the network, the first
	// included, as KVCM counts them (URI retry_count); also the number of dial attempts of a
	// connection, 50 ms apart. Default 2.
	RetryCount int
	// MaxPoolSize caps the pooled connections (URI client_max_pool_size). Default 16.
	MaxPoolSize int
	// MinPoolSize is the number of idle connections kept open (URI client_min_pool_size).
	// Default 0.
	MinPoolSize int
}

// TLSOptions configure TLS to Redis. KVCM itself speaks plain TCP only; TLS is for
// deployments where kvcm-gc reaches Redis through a TLS port or proxy.
type TLSOptions struct {
	Enabled bool
	// CAFile is a PEM bundle of CAs to trust; empty means the system roots.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and key, for servers that require one.
	CertFile string
	KeyFile  string
	// ServerName overrides the name checked in the server certificate (default: the host).
	ServerName string
	// InsecureSkipVerify disables certificate verification. For tests only.
	InsecureSkipVerify bool
}

// ParseURI parses one of kvcm-gc's own Redis URIs with default options.
// See ConnOptions.ApplyURI for the syntax.
func ParseURI(uri string) (ConnOptions, error) {
	return ConnOptions{}.ApplyURI(uri)
}

// ApplyURI returns o changed by one of kvcm-gc's own URIs (registry.uri, meta.store_uris,
// meta.group_store_uris), read strictly, in KVCM's style:
//
//	redis[s]://[userinfo@]host[:port][/ignored]
//	    [?timeout_ms=&retry_count=&client_max_pool_size=&client_min_pool_size=&db=]
//
// There is no percent-decoding. userinfo, when present and not empty, becomes UserInfo (KVCM-
// style AUTH) and clears o's Username and Password; without userinfo o's credentials stay, so
// a URI of KVCM's can be combined with kvcm-gc's own ACL user. rediss enables TLS with o's TLS
// material; redis disables it. A URI without a port gets DefaultPort. Numeric parameters that
// are zero or negative keep the current value, as in KVCM; parameters that are not decimal
// integers are an error (KVCM would ignore them silently, which hides typos). Unknown
// parameters (cluster_name, …) are ignored. A '/' or '?' in the userinfo is an error. URIs
// taken from KVCM's registry are read with ApplyKVCMURI instead. Errors wrap ErrBadURI and
// never contain credentials.
func (o ConnOptions) ApplyURI(uri string) (ConnOptions, error) {
	red := Redact(uri)
	scheme, rest, ok := strings.Cut(uri, "://")
	if !ok {
		return o, fmt.Errorf("parse %q: missing scheme: %w", red, ErrBadURI)
	}
	switch scheme {
	case "redis":
		o.TLS.Enabled = false
	case "rediss":
		o.TLS.Enabled = true
	default:
		return o, fmt.Errorf("parse %q: scheme is not redis or rediss: %w", red, ErrBadURI)
	}
	// The authority ends at the first '/' or '?'. KVCM takes userinfo up to the first '@'; a
	// '/' or '?' inside userinfo breaks KVCM's own parse, so no working URI has one and both
	// readings agree.
	end := strings.IndexAny(rest, "/?")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	hostPort := authority
	if at := strings.IndexByte(authority, '@'); at >= 0 {
		if ui := authority[:at]; ui != "" {
			o.UserInfo, o.Username, o.Password = ui, "", ""
		}
		hostPort = authority[at+1:]
	}
	// KVCM splits host and port at the first ':'. A bracketed IPv6 literal, which KVCM cannot
	// use, is accepted for kvcm-gc's own settings.
	host, portStr, hasPort := hostPort, "", false
	if strings.HasPrefix(hostPort, "[") {
		i := strings.IndexByte(hostPort, ']')
		if i < 0 {
			return o, fmt.Errorf("parse %q: unterminated IPv6 literal: %w", red, ErrBadURI)
		}
		host = hostPort[1:i]
		if tail := hostPort[i+1:]; tail != "" {
			if portStr, hasPort = strings.CutPrefix(tail, ":"); !hasPort {
				return o, fmt.Errorf("parse %q: junk after IPv6 literal: %w", red, ErrBadURI)
			}
		}
	} else if h, p, ok := strings.Cut(hostPort, ":"); ok {
		host, portStr, hasPort = h, p, true
	}
	port := strconv.Itoa(DefaultPort)
	if hasPort {
		n, err := strconv.ParseUint(portStr, 10, 16)
		if err != nil || n == 0 {
			// The port is not echoed: a mis-split URI may put part of a password here.
			return o, fmt.Errorf("parse %q: bad port: %w", red, ErrBadURI)
		}
		port = strconv.FormatUint(n, 10) // canonical, so "h:01" and "h:1" name one store
	}
	if host == "" {
		return o, fmt.Errorf("parse %q: empty host: %w", red, ErrBadURI)
	}
	o.Addr = net.JoinHostPort(host, port)

	_, query, _ := strings.Cut(tail, "?")
	for _, kv := range strings.Split(query, "&") {
		if kv == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		var dst *int
		var unit time.Duration
		switch k {
		case "timeout_ms":
			unit = time.Millisecond
		case "retry_count":
			dst = &o.RetryCount
		case "client_max_pool_size":
			dst = &o.MaxPoolSize
		case "client_min_pool_size":
			dst = &o.MinPoolSize
		case "db":
			dst = &o.DB
		default:
			continue
		}
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil {
			return o, fmt.Errorf("parse %q: parameter %s is not a decimal integer: %w", red, k, ErrBadURI)
		}
		if n <= 0 {
			continue
		}
		if unit != 0 {
			o.Timeout = time.Duration(n) * unit
		} else {
			*dst = int(n)
		}
	}
	return o, nil
}

// ParseKVCMURI parses a metadata store URI of KVCM's registry with default options. See
// ConnOptions.ApplyKVCMURI.
func ParseKVCMURI(uri string) (ConnOptions, error) {
	return ConnOptions{}.ApplyKVCMURI(uri)
}

// ApplyKVCMURI returns o changed by a metadata store URI taken from KVCM's registry
// (meta_storage_backend_config.storage_uri), read exactly as KVCM's StandardUri and
// RedisClient read it (kvcm.ParseStoreURI has the grammar):
//
//   - the scheme is ignored: tcp://, redis://, rediss:// and any other connect alike, in
//     plain TCP for KVCM; TLS is o's (kvcm-gc's own meta.tls settings) and nothing else;
//   - the userinfo, up to the first '@' anywhere after "://", is KVCM's own credentials. It
//     becomes UserInfo (the single AUTH argument, sent after NOAUTH) only when o has no
//     credentials of its own (HasCredentials): a configured ACL user, kvcm-gc's least
//     privilege on that store, is never replaced by KVCM's user and its rights. A password
//     holding '/' works ("redis://user:pa/ss@h:6379" is h:6379 with AUTH "user:pa/ss"), but
//     then nothing may follow the port, as in KVCM;
//   - a URI without a port (or with port 0) is refused: KVCM would dial port 0 and fail;
//   - db: current KVCM selects database N for db=N with N > 0 (std::from_chars, digits only,
//     the whole value; anything else leaves DB 0). DB is always KVCM's, whatever o's was;
//   - timeout_ms, retry_count, client_max_pool_size and client_min_pool_size replace o's
//     values when they read as a positive integer, as in KVCM; any other value keeps o's,
//     as KVCM keeps its default.
//
// A URI KVCM cannot use, or that its versions read differently, is refused, and so is a
// server KVCM could not dial (a host holding '@', '/' or '?', which is what a mis-split
// password leaves), a port beyond 65535, a database SELECT refuses (above 2^31-1) and a pool
// size above MaxPoolSizeLimit. Errors wrap ErrBadURI and never contain credentials.
func (o ConnOptions) ApplyKVCMURI(uri string) (ConnOptions, error) {
	red := Redact(uri)
	u, err := kvcm.ParseStoreURI(uri)
	if err != nil {
		reason := err.Error()
		if se := (*kvcm.StoreURIError)(nil); errors.As(err, &se) {
			reason = se.Reason // without the "bad meta store uri" ErrBadURI says again
		}
		return o, fmt.Errorf("parse %q as KVCM does: %s: %w", red, reason, ErrBadURI)
	}
	// Neither the host nor the port is echoed: a mis-split URI may put part of a password there.
	switch {
	case u.Port == 0:
		return o, fmt.Errorf("parse %q as KVCM does: no port: KVCM would dial port 0 and fail: %w", red, ErrBadURI)
	case u.Port < 0 || u.Port > math.MaxUint16:
		return o, fmt.Errorf("parse %q as KVCM does: port out of range: %w", red, ErrBadURI)
	case !dialableHost(u.Host):
		return o, fmt.Errorf("parse %q as KVCM does: the host is empty or not a name KVCM can dial: %w", red, ErrBadURI)
	}
	o.Addr = net.JoinHostPort(u.Host, strconv.FormatInt(u.Port, 10))
	if u.UserInfo != "" && !o.HasCredentials() {
		o.UserInfo = u.UserInfo
	}
	// RedisClient: db_ starts at 0 and takes a parsed value >= 0; SELECT only when > 0.
	o.DB = 0
	if n, ok := u.ParamInt64("db"); ok && n >= 0 {
		if n > math.MaxInt32 {
			return o, fmt.Errorf("parse %q as KVCM does: db %d: no Redis has that database, "+
				"KVCM's SELECT would fail: %w", red, n, ErrBadURI)
		}
		o.DB = int(n)
	}
	if n, ok := u.ParamInt64("timeout_ms"); ok && n > 0 {
		o.Timeout = time.Duration(min(n, math.MaxInt64/int64(time.Millisecond))) * time.Millisecond
	}
	if n, ok := u.ParamInt64("retry_count"); ok && n > 0 {
		o.RetryCount = int(min(n, math.MaxInt32))
	}
	for _, p := range []struct {
		name string
		dst  *int
	}{{"client_max_pool_size", &o.MaxPoolSize}, {"client_min_pool_size", &o.MinPoolSize}} {
		if n, ok := u.ParamInt64(p.name); ok && n > 0 {
			if n > MaxPoolSizeLimit {
				return o, fmt.Errorf("parse %q as KVCM does: %s %d above kvcm-gc's limit %d: %w",
					red, p.name, n, MaxPoolSizeLimit, ErrBadURI)
			}
			*p.dst = int(n)
		}
	}
	return o, nil
}

// dialableHost reports whether KVCM's client could resolve host at all. A host holding '@',
// '/' or '?' is what is left of a URI whose password KVCM split in the wrong place.
func dialableHost(host string) bool {
	if host == "" {
		return false
	}
	for i := 0; i < len(host); i++ {
		if c := host[i]; c <= ' ' || c == 0x7f || strings.IndexByte("@/?#[]", c) >= 0 {
			return false
		}
	}
	return true
}

// Name returns the credential-free name of the server: "host:port", plus "?db=N" for a
// database other than 0. It is a metadata store's name in a registry snapshot, and
// "redis://"+Name() parses back to the same server.
func (o ConnOptions) Name() string {
	if o.DB > 0 {
		return o.Addr + "?db=" + strconv.Itoa(o.DB)
	}
	return o.Addr
}

// String describes o without credentials, as a URI.
func (o ConnOptions) String() string {
	scheme := "redis"
	if o.TLS.Enabled {
		scheme = "rediss"
	}
	var ui string
	switch {
	case o.UserInfo != "":
		ui = "***@"
	case o.Username != "":
		ui = o.Username + ":***@"
	case o.Password != "":
		ui = ":***@"
	}
	return scheme + "://" + ui + o.Name()
}

// GoString keeps %#v from printing the credentials.
func (o ConnOptions) GoString() string { return "redismeta.ConnOptions(" + o.String() + ")" }

// LogValue keeps slog handlers (the JSON one marshals exported fields) from logging the
// credentials.
func (o ConnOptions) LogValue() slog.Value { return slog.StringValue(o.String()) }

// HasCredentials reports whether o signs in with credentials of its own: an ACL user or
// password, or a KVCM-style userinfo.
func (o ConnOptions) HasCredentials() bool {
	return o.UserInfo != "" || o.Username != "" || o.Password != ""
}

// Validate reports settings NewClient cannot use.
func (o ConnOptions) Validate() error {
	if o.Addr == "" {
		return errors.New("redis options: empty address")
	}
	if o.UserInfo != "" && (o.Username != "" || o.Password != "") {
		return fmt.Errorf("redis options %s: KVCM-style userinfo and ACL username/password are exclusive", o)
	}
	if o.MaxPoolSize > MaxPoolSizeLimit {
		return fmt.Errorf("redis options %s: max pool size %d above %d", o, o.MaxPoolSize, MaxPoolSizeLimit)
	}
	if o.MinPoolSize > o.maxPoolSize() {
		return fmt.Errorf("redis options %s: min pool size %d above max pool size %d", o, o.MinPoolSize, o.maxPoolSize())
	}
	if (o.TLS.CertFile == "") != (o.TLS.KeyFile == "") {
		return fmt.Errorf("redis options %s: TLS client certificate and key must be given together", o)
	}
	return nil
}

func (o ConnOptions) maxPoolSize() int {
	if o.MaxPoolSize > 0 {
		return o.MaxPoolSize
	}
	return DefaultMaxPoolSize
}

// TLSConfig builds the client TLS configuration, nil when TLS is off.
func (o ConnOptions) TLSConfig() (*tls.Config, error) {
	t := o.TLS
	if !t.Enabled {
		return nil, nil
	}
	conf := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         t.ServerName,
		InsecureSkipVerify: t.InsecureSkipVerify, //nolint:gosec // opt-in, documented as tests only
	}
	if conf.ServerName == "" {
		if host, _, err := net.SplitHostPort(o.Addr); err == nil {
			conf.ServerName = host
		}
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read TLS CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("TLS CA file %s holds no PEM certificate", t.CAFile)
		}
		conf.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load TLS client certificate: %w", err)
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	return conf, nil
}

// NewClient builds a go-redis client for o. It does not connect: a wrong address or password
// shows at the first command.
//
// The client speaks RESP2 and sends no CLIENT SETINFO and no maintenance-notification
// handshake, so it needs no permission beyond the commands it is asked to run plus
// HELLO/AUTH/PING (a read-only ACL user works), and behaves like KVCM's hiredis client
// towards proxies.
func NewClient(o ConnOptions) (*redis.Client, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	tlsConf, err := o.TLSConfig()
	if err != nil {
		return nil, fmt.Errorf("redis %s: %w", o, err)
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	poolTimeout := o.PoolTimeout
	if poolTimeout <= 0 {
		poolTimeout = DefaultPoolTimeout
	}
	attempts := o.RetryCount
	if attempts <= 0 {
		attempts = DefaultRetryCount
	}
	maxRetries := attempts - 1
	if maxRetries == 0 {
		maxRetries = -1 // go-redis reads 0 as "default (3)"; -1 is "none"
	}
	ro := &redis.Options{
		Addr:                     o.Addr,
		DB:                       o.DB,
		Username:                 o.Username,
		Password:                 o.Password,
		TLSConfig:                tlsConf,
		Protocol:                 2,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		DialTimeout:              timeout,
		ReadTimeout:              timeout,
		WriteTimeout:             timeout,
		ContextTimeoutEnabled:    true,
		PoolTimeout:              poolTimeout,
		MaxRetries:               maxRetries,
		// KVCM's Reconnect: retry_count attempts, 50 ms apart.
		DialerRetries:      attempts,
		DialerRetryTimeout: 50 * time.Millisecond,
		PoolSize:           o.maxPoolSize(),
		MinIdleConns:       o.MinPoolSize,
	}
	if o.UserInfo != "" {
		// go-redis would SELECT before OnConnect, i.e. before the AUTH a protected server
		// needs; the hook selects the database itself, after authenticating, as KVCM does.
		ro.DB = 0
		ro.OnConnect = kvcmAuth(o.UserInfo, o.Name(), o.DB)
	}
	return redis.NewClient(ro), nil
}

// kvcmAuth authenticates a new connection as KVCM's RedisClient::Connect does: PING first,
// and only when the reply starts with NOAUTH, AUTH with the raw userinfo as one argument, then
// PING again; then SELECT db when db > 0. (go-redis's own HELLO ran before without
// credentials; on a server that needs a password it fails with NOAUTH and go-redis carries on
// in RESP2.) Errors name the server, never the userinfo.
func kvcmAuth(userInfo, name string, db int) func(context.Context, *redis.Conn) error {
	return func(ctx context.Context, cn *redis.Conn) error {
		if err := cn.Ping(ctx).Err(); err != nil {
			if !strings.HasPrefix(err.Error(), "NOAUTH") {
				return &connectError{what: "ping redis " + name, err: err}
			}
			if err := cn.Auth(ctx, userInfo).Err(); err != nil {
				return &connectError{what: "authenticate to redis " + name + " with the URI's userinfo", err: err}
			}
			if err := cn.Ping(ctx).Err(); err != nil {
				return &connectError{what: "ping redis " + name + " after auth", err: err}
			}
		}
		if db > 0 {
			if err := cn.Select(ctx, db).Err(); err != nil {
				return &connectError{what: "select database of redis " + name, err: err}
			}
		}
		return nil
	}
}

// connectError carries what a connection hook was doing. go-redis hands a failed connection
// set-up to the caller after one errors.Unwrap, which would strip an fmt.Errorf wrapper and
// leave a bare "WRONGPASS"; this type exposes its cause through Unwrap() []error, which
// errors.Is and errors.As follow and errors.Unwrap does not.
type connectError struct {
	what string
	err  error
}

func (e *connectError) Error() string   { return e.what + ": " + e.err.Error() }
func (e *connectError) Unwrap() []error { return []error{e.err} }

// Redact returns uri with its userinfo replaced by "***" and the values of parameters whose
// name suggests a secret (password, secret, token) hidden, for logs and errors. It never
// fails: text it cannot parse loses everything before its last '@'.
func Redact(uri string) string {
	start := 0
	if i := strings.Index(uri, "://"); i >= 0 {
		start = i + 3
	}
	if at := strings.LastIndexByte(uri, '@'); at >= start {
		uri = uri[:start] + "***" + uri[at:]
	} else if at >= 0 {
		uri = "***" + uri[at:]
	}
	base, query, ok := strings.Cut(uri, "?")
	if !ok {
		return uri
	}
	params := strings.Split(query, "&")
	for i, kv := range params {
		k, _, hasValue := strings.Cut(kv, "=")
		lk := strings.ToLower(k)
		if hasValue && (strings.Contains(lk, "pass") || strings.Contains(lk, "secret") || strings.Contains(lk, "token")) {
			params[i] = k + "=***"
		}
	}
	return base + "?" + strings.Join(params, "&")
}

// ClusterName returns the cluster_name parameter of a KVCM registry URI
// (kvcm.registry_storage.uri, "redis://host:port?cluster_name=c1"); ok is false without one.
func ClusterName(uri string) (name string, ok bool) {
	_, query, _ := strings.Cut(uri, "?")
	for _, kv := range strings.Split(query, "&") {
		if v, found := strings.CutPrefix(kv, "cluster_name="); found && v != "" {
			return v, true
		}
	}
	return "", false
}
