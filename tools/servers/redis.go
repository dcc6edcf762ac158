package servers

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Integration tests run against a real redis-server rather than a fake: what kvcm-gc must get
// right (glob-escaped SCAN patterns, Lua byte comparisons, ACL read-only users, NOAUTH-driven
// AUTH) is exactly what fakes get subtly wrong.

const (
	// redisBinary is looked up on PATH; Debian ships it in the redis-server package.
	redisBinary = "redis-server"
	// redisReadyTimeout bounds how long a starting server may take to answer PING.
	redisReadyTimeout = 15 * time.Second
	// redisStopTimeout bounds a graceful SIGTERM shutdown before it becomes a SIGKILL.
	redisStopTimeout = 10 * time.Second
	// redisStartAttempts: the free port is found by binding port 0 and releasing it, so another
	// process may grab it before redis-server binds; a fresh port is tried a few times.
	redisStartAttempts = 3
)

// RedisOption configures StartRedis.
type RedisOption func(*redisConfig)

type redisConfig struct {
	persistent bool
	tls        *RedisTLSFiles
	args       []string
}

// WithRedisPersistence turns on the append-only file with fsync on every write, so data
// survives Restart and even Kill (SIGKILL). The default is no persistence at all.
func WithRedisPersistence() RedisOption {
	return func(c *redisConfig) { c.persistent = true }
}

// WithRedisTLS makes the server accept TLS connections only (the plain port is disabled).
// Client certificates are optional; add WithRedisArgs("--tls-auth-clients", "yes") to require
// them (a later argument overrides an earlier one).
func WithRedisTLS(files RedisTLSFiles) RedisOption {
	return func(c *redisConfig) { c.tls = &files }
}

// WithRedisArgs appends raw redis-server command-line arguments ("--maxmemory", "10mb").
func WithRedisArgs(args ...string) RedisOption {
	return func(c *redisConfig) { c.args = append(c.args, args...) }
}

// Redis is a redis-server child process listening on a loopback port, with its own
// directory. Its methods are safe for concurrent use.
type Redis struct {
	bin     string
	dir     string
	ownDir  bool // dir was created by StartRedisServer and is removed by Close
	port    int
	cfg     redisConfig
	tlsConf *tls.Config

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{} // closed when cmd has been waited for
	password string        // the default user's password, "" when none
	users    []redisACLUser
	client   *redis.Client
	closed   bool
}

type redisACLUser struct {
	name, pass string
	rules      []string
}

// StartRedis starts a redis-server working in dir (its log, and the AOF with
// WithRedisPersistence); an empty dir is a new temporary directory that Close removes. The
// caller must Close the server. A missing redis-server binary is an error naming the package
// to install.
func StartRedis(dir string, opts ...RedisOption) (*Redis, error) {
	if _, err := exec.LookPath(redisBinary); err != nil {
		return nil, fmt.Errorf("redis-server not found on PATH (install the Debian package redis-server): %w", err)
	}
	if dir != "" {
		return startRedis(dir, false, opts)
	}
	dir, err := os.MkdirTemp("", "redis-")
	if err != nil {
		return nil, fmt.Errorf("create redis directory: %w", err)
	}
	r, err := startRedis(dir, true, opts)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return r, nil
}

func startRedis(dir string, ownDir bool, opts []RedisOption) (*Redis, error) {
	bin, err := exec.LookPath(redisBinary)
	if err != nil {
		return nil, fmt.Errorf("find %s: %w", redisBinary, err)
	}
	r := &Redis{bin: bin, dir: dir, ownDir: ownDir}
	for _, o := range opts {
		o(&r.cfg)
	}
	if r.cfg.tls != nil {
		if r.tlsConf, err = r.cfg.tls.ClientConfig(); err != nil {
			return nil, err
		}
	}
	var lastErr error
	for range redisStartAttempts {
		if r.port, err = redisFreePort(); err != nil {
			return nil, err
		}
		r.mu.Lock()
		lastErr = r.startLocked()
		r.mu.Unlock()
		if lastErr == nil {
			return r, nil
		}
	}
	return nil, lastErr
}

// redisFreePort asks the kernel for a free loopback port.
func redisFreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (r *Redis) args() []string {
	port := strconv.Itoa(r.port)
	args := []string{
		"--bind", "127.0.0.1",
		"--dir", r.dir,
		"--logfile", filepath.Join(r.dir, "redis.log"),
		"--daemonize", "no",
		"--save", "",
	}
	if r.cfg.persistent {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	if t := r.cfg.tls; t != nil {
		args = append(args, "--port", "0", "--tls-port", port,
			"--tls-cert-file", t.CertFile, "--tls-key-file", t.KeyFile,
			"--tls-ca-cert-file", t.CAFile, "--tls-auth-clients", "optional")
	} else {
		args = append(args, "--port", port)
	}
	return append(args, r.cfg.args...)
}

// startLocked starts the process and waits until it answers as our process and has loaded
// its dataset (ping). r.mu is held.
func (r *Redis) startLocked() error {
	cmd := exec.Command(r.bin, r.args()...)
	cmd.Dir = r.dir
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", r.bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	r.cmd, r.exited = cmd, exited

	deadline := time.Now().Add(redisReadyTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		err := r.ping(cmd.Process.Pid)
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			r.cmd = nil
			return fmt.Errorf("redis-server on port %d exited during startup: %s", r.port, r.logTail())
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			r.killLocked()
			return fmt.Errorf("redis-server on port %d not ready after %s: %v; log: %s", r.port, redisReadyTimeout, err, r.logTail())
		}
	}
}

// ping asks the server on our port for INFO server and checks that it is our process: the
// port was free when chosen, but another server may have taken it since, and our own process
// then exits while the other one answers. It then asks for INFO persistence: a server still
// loading its dataset answers every write with LOADING, so it is not ready yet. An error
// reply (NOAUTH) proves only that a server is serving. (A raw connection rather than a
// go-redis client: the client's own dial retries would slow the wait down and log every
// refused attempt.)
func (r *Redis) ping(pid int) error {
	d := &net.Dialer{Timeout: time.Second}
	var conn net.Conn
	var err error
	if r.tlsConf != nil {
		conn, err = tls.DialWithDialer(d, "tcp", r.Addr(), r.tlsConf.Clone())
	} else {
		conn, err = d.Dial("tcp", r.Addr())
	}
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(time.Second)); err != nil {
		return err
	}
	br := bufio.NewReader(conn)
	body, err := info(conn, br, "server")
	if err != nil || body == "" {
		return err
	}
	if !strings.Contains(body, "process_id:"+strconv.Itoa(pid)+"\r\n") {
		return errRedisForeignServer
	}
	if body, err = info(conn, br, "persistence"); err != nil {
		return err
	}
	if strings.Contains(body, "loading:1\r\n") {
		return errRedisLoading
	}
	return nil
}

// info sends INFO section on conn and returns the reply's text ("" for an error reply).
func info(conn net.Conn, br *bufio.Reader, section string) (string, error) {
	if _, err := conn.Write([]byte("INFO " + section + "\r\n")); err != nil {
		return "", err
	}
	line, err := br.ReadString('\n')
	if err != nil {
		return "", err
	}
	switch {
	case strings.HasPrefix(line, "-"):
		return "", nil
	case !strings.HasPrefix(line, "$"):
		return "", fmt.Errorf("unexpected reply to INFO %s: %q", section, line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 0 {
		return "", fmt.Errorf("unexpected reply to INFO %s: %q", section, line)
	}
	body := make([]byte, n+2) // and its CRLF
	if _, err := io.ReadFull(br, body); err != nil {
		return "", err
	}
	return string(body[:n]), nil
}

// errRedisForeignServer: the port answers, but not with the process just started.
var errRedisForeignServer = errors.New("another server answers on the port")

// errRedisLoading: our process answers, but is still loading its dataset from disk.
var errRedisLoading = errors.New("still loading its dataset")

// logTail returns the last lines of the server log, for startup errors.
func (r *Redis) logTail() string {
	b, err := os.ReadFile(filepath.Join(r.dir, "redis.log"))
	if err != nil {
		return "(no log)"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 10 {
		lines = lines[len(lines)-10:]
	}
	return strings.Join(lines, "\n")
}

// Addr returns "127.0.0.1:<port>".
func (r *Redis) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port)) }

// Pid is the running server's process ID, 0 when it is stopped. The main thread's ID is the
// same, so /proc/<pid>/task/<pid> is the thread that serves commands.
func (r *Redis) Pid() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil || r.cmd.Process == nil {
		return 0
	}
	return r.cmd.Process.Pid
}

// Port returns the server's port, stable across Restart.
func (r *Redis) Port() int { return r.port }

// Dir returns the server's working directory (AOF files, log).
func (r *Redis) Dir() string { return r.dir }

// URI returns "redis://127.0.0.1:<port>" ("rediss://…" when serving TLS).
func (r *Redis) URI() string {
	if r.cfg.tls != nil {
		return "rediss://" + r.Addr()
	}
	return "redis://" + r.Addr()
}

// TLSConfig returns a client TLS configuration trusting the server's CA, nil without TLS.
func (r *Redis) TLSConfig() *tls.Config {
	if r.tlsConf == nil {
		return nil
	}
	return r.tlsConf.Clone()
}

// Client returns an administrative client (all permissions, the current default-user
// password), created on first use and closed with the server. It reconnects by itself after
// Restart.
func (r *Redis) Client() *redis.Client {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.client == nil {
		r.client = redis.NewClient(&redis.Options{
			Addr:            r.Addr(),
			TLSConfig:       r.TLSConfig(),
			Protocol:        2,
			DisableIdentity: true,
			CredentialsProvider: func() (string, string) {
				r.mu.Lock()
				defer r.mu.Unlock()
				return "", r.password
			},
		})
	}
	return r.client
}

// Stop shuts the server down gracefully (SIGTERM; the AOF is flushed when persistence is on)
// and waits for it to exit. Stopping a stopped server does nothing.
func (r *Redis) Stop() { withLock(&r.mu, r.stopLocked) }

// withLock runs f holding mu.
func withLock(mu *sync.Mutex, f func()) {
	mu.Lock()
	defer mu.Unlock()
	f()
}

func (r *Redis) stopLocked() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGCONT) // a frozen server would not see the SIGTERM
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
		r.cmd = nil
	case <-time.After(redisStopTimeout):
		r.killLocked()
	}
}

// Freeze stops the server's process (SIGSTOP): its connections stay open and nothing answers,
// as a server that hangs. Thaw lets it run again.
func (r *Redis) Freeze() { r.signal(syscall.SIGSTOP) }

// Thaw resumes a server Freeze stopped (SIGCONT).
func (r *Redis) Thaw() { r.signal(syscall.SIGCONT) }

func (r *Redis) signal(sig syscall.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		_ = r.cmd.Process.Signal(sig)
	}
}

// Kill ends the server with SIGKILL (a crash: nothing is flushed beyond what fsync already
// wrote) and waits for it to exit.
func (r *Redis) Kill() { withLock(&r.mu, r.killLocked) }

func (r *Redis) killLocked() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	<-r.exited
	r.cmd = nil
}

// Restart stops the server if it runs and starts it again on the same port and directory.
// ACL users and the default-user password set through this type are set again, because
// redis-server does not persist CONFIG SET or ACL SETUSER by itself.
func (r *Redis) Restart() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errors.New("redis-server already closed")
	}
	r.stopLocked()
	if err := r.startLocked(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), redisReadyTimeout)
	defer cancel()
	// A fresh, unauthenticated connection: the restarted server has no password yet.
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), TLSConfig: r.TLSConfig(), Protocol: 2, DisableIdentity: true})
	defer c.Close()
	for _, u := range r.users {
		if err := c.Do(ctx, u.setUserArgs()...).Err(); err != nil {
			return fmt.Errorf("restore ACL user %q: %w", u.name, err)
		}
	}
	if r.password != "" {
		if err := c.ConfigSet(ctx, "requirepass", r.password).Err(); err != nil {
			return fmt.Errorf("restore requirepass: %w", err)
		}
	}
	return nil
}

// Close stops the server, closes the administrative client and, when StartRedis made the
// directory, removes it. It is idempotent.
func (r *Redis) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	client := r.client
	r.client = nil
	r.stopLocked()
	r.mu.Unlock()
	var errs []error
	if client != nil {
		if err := client.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
			errs = append(errs, fmt.Errorf("close admin client: %w", err))
		}
	}
	if r.ownDir {
		if err := os.RemoveAll(r.dir); err != nil {
			errs = append(errs, fmt.Errorf("remove redis directory: %w", err))
		}
	}
	return errors.Join(errs...)
}

func (u redisACLUser) setUserArgs() []any {
	args := []any{"ACL", "SETUSER", u.name, "reset", "on", ">" + u.pass}
	for _, rule := range u.rules {
		args = append(args, rule)
	}
	return args
}

// AddUser creates (or resets) the ACL user name with password pass and the given ACL rules,
// for example AddUser(ctx, "scanner", "pw", "~*", "+scan", "+hmget"). Without rules the user
// can authenticate but run nothing; "reset" comes first so the rules are exactly these.
func (r *Redis) AddUser(ctx context.Context, name, pass string, rules ...string) error {
	u := redisACLUser{name: name, pass: pass, rules: append([]string(nil), rules...)}
	if err := r.Client().Do(ctx, u.setUserArgs()...).Err(); err != nil {
		return fmt.Errorf("ACL SETUSER %s: %w", name, err)
	}
	r.mu.Lock()
	r.users = append(r.users, u)
	r.mu.Unlock()
	return nil
}

// RequirePass sets the default user's password with CONFIG SET requirepass, as a KVCM
// deployment with "redis://user:pw@host" URIs does: the whole "user:pw" is then the password.
// The administrative client keeps working with the new password; an empty pass removes it.
func (r *Redis) RequirePass(ctx context.Context, pass string) error {
	if err := r.Client().ConfigSet(ctx, "requirepass", pass).Err(); err != nil {
		return fmt.Errorf("CONFIG SET requirepass: %w", err)
	}
	r.mu.Lock()
	r.password = pass
	r.mu.Unlock()
	return nil
}

// CommandStats returns the number of calls per command since start (or the last CONFIG
// RESETSTAT), from INFO commandstats: "hmget" → 12, "client|setinfo" → 2. Tests compare two
// snapshots to prove which commands a piece of code sent.
func (r *Redis) CommandStats(ctx context.Context) (map[string]int64, error) {
	info, err := r.Client().Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("INFO commandstats: %w", err)
	}
	return parseRedisCommandStats(info)
}

// parseRedisCommandStats reads lines like "cmdstat_hmget:calls=3,usec=10,…".
func parseRedisCommandStats(info string) (map[string]int64, error) {
	stats := make(map[string]int64)
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		name, ok = strings.CutPrefix(name, "cmdstat_")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("parse calls of %q: %w", name, err)
				}
				stats[name] = n
			}
		}
	}
	return stats, sc.Err()
}

// RedisTLSFiles are PEM files of a throw-away CA, a server certificate for 127.0.0.1 and
// localhost, and a client certificate, all signed by that CA.
type RedisTLSFiles struct {
	CAFile         string
	CertFile       string // server certificate
	KeyFile        string // server key
	ClientCertFile string
	ClientKeyFile  string
}

// GenerateRedisTLSFiles writes RedisTLSFiles into dir.
func GenerateRedisTLSFiles(dir string) (RedisTLSFiles, error) {
	f := RedisTLSFiles{
		CAFile:         filepath.Join(dir, "ca.pem"),
		CertFile:       filepath.Join(dir, "server.pem"),
		KeyFile:        filepath.Join(dir, "server-key.pem"),
		ClientCertFile: filepath.Join(dir, "client.pem"),
		ClientKeyFile:  filepath.Join(dir, "client-key.pem"),
	}
	ca, err := NewCA("test redis CA")
	if err != nil {
		return f, err
	}
	if err := writePEM(f.CAFile, "CERTIFICATE", ca.DER); err != nil {
		return f, err
	}
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, certFile, keyFile string) error {
		der, key, err := ca.sign(serial, cn, usage)
		if err != nil {
			return err
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return fmt.Errorf("marshal %s key: %w", cn, err)
		}
		if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
			return err
		}
		return writePEM(keyFile, "PRIVATE KEY", keyDER)
	}
	if err := leaf(2, "localhost", x509.ExtKeyUsageServerAuth, f.CertFile, f.KeyFile); err != nil {
		return f, err
	}
	if err := leaf(3, "test client", x509.ExtKeyUsageClientAuth, f.ClientCertFile, f.ClientKeyFile); err != nil {
		return f, err
	}
	return f, nil
}

// CA is a throw-away certificate authority of the test servers' TLS (redis, NATS, the
// Kubernetes API server), valid from an hour ago for one day.
type CA struct {
	Cert *x509.Certificate
	DER  []byte // Cert, encoded
	Key  *ecdsa.PrivateKey
}

// NewCA generates a CA named cn.
func NewCA(cn string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	return &CA{Cert: cert, DER: der, Key: key}, nil
}

// sign issues a certificate named cn for localhost, 127.0.0.1 and ::1 with usage, valid as
// long as the CA, and returns it (DER) with its key.
func (ca *CA) sign(serial int64, cn string, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate %s key: %w", cn, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    ca.Cert.NotBefore,
		NotAfter:     ca.Cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("create %s certificate: %w", cn, err)
	}
	return der, key, nil
}

func writePEM(path, typ string, der []byte) error {
	data := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	return nil
}

// ClientConfig returns a TLS client configuration that trusts the CA and presents the client
// certificate.
func (f RedisTLSFiles) ClientConfig() (*tls.Config, error) {
	ca, err := os.ReadFile(f.CAFile)
	if err != nil {
		return nil, fmt.Errorf("read CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, errors.New("CA file holds no PEM certificate")
	}
	cert, err := tls.LoadX509KeyPair(f.ClientCertFile, f.ClientKeyFile)
	if err != nil {
		return nil, fmt.Errorf("load client certificate: %w", err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}
