// Package natsembed runs a NATS server with JetStream inside the process: the all-in-one
// command's message bus, and the server of integration tests. It listens on TCP, so other
// processes (the stages, the `nats` CLI) can connect to it as to any NATS deployment.
package natsembed

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Config describes an embedded server. The zero value of every field but StoreDir is usable.
type Config struct {
	// StoreDir is the JetStream file store directory (required). Restarting a server on the
	// same directory keeps every stream, consumer and bucket.
	StoreDir string
	// Host to listen on; "" means 127.0.0.1 (loopback only).
	Host string
	// Port to listen on; 0 lets the system choose a free port (read it with Addr).
	Port int
	// ServerName, shown in server info and advisories; "" lets the server pick one.
	ServerName string
	// MaxPayload caps a message (headers and payload) in bytes; 0 keeps the server default
	// of 1 MiB.
	MaxPayload int32
	// Accounts with their users and permissions. Empty: no authentication, every client in
	// one account with JetStream.
	Accounts []Account
	// TLS, when set, makes clients connect with TLS.
	TLS *tls.Config
	// SyncAlways makes the file store fsync every write; by default it syncs periodically
	// (writes still reach the OS at once and survive a kill of the process).
	SyncAlways bool
	// Logger receives the server's log lines; nil discards them.
	Logger *slog.Logger
	// ReadyTimeout bounds the wait for the server to accept connections; 0 means 10 s.
	ReadyTimeout time.Duration
	// Cluster, when set, makes the server one node of a JetStream cluster.
	Cluster *Cluster
	// MaxStore caps what the streams may reserve in the file store, in bytes. 0 keeps the
	// server's default: three quarters of the disk free when it starts, so the same streams
	// are refused (insufficient storage resources) on a fuller disk.
	MaxStore int64
}

// Cluster is a server's place in a JetStream cluster: the name every node shares, the address
// its routes listen on, and the route URLs of every node (its own may be among them). Each node
// needs its own ServerName and StoreDir.
type Cluster struct {
	Name string
	// Host and Port of the route listener; "" means 127.0.0.1, 0 a free port.
	Host string
	Port int
	// Routes are nats-route://host:port URLs of the nodes to connect to.
	Routes []string
}

// Account is an isolated namespace of subjects and streams, with its users.
type Account struct {
	Name      string
	JetStream bool // JetStream enabled for the account (unlimited)
	Users     []User
}

// User is a user/password login bound to an account.
type User struct {
	Name     string
	Password string
	// Publish and Subscribe restrict the subjects the user may use; nil allows every subject.
	Publish   *Permission
	Subscribe *Permission
	// AllowResponses lets the user publish to the reply subject of a request it received,
	// whatever Publish says (what a service answering requests needs).
	AllowResponses bool
}

// Permission lists subjects (wildcards allowed) a user may or may not use; Deny wins.
type Permission struct {
	Allow []string
	Deny  []string
}

// Start starts a server and waits until it accepts connections. The caller stops it with
// Shutdown and WaitForShutdown.
func Start(cfg Config) (*server.Server, error) {
	opts, err := Options(cfg)
	if err != nil {
		return nil, err
	}
	log := &logger{log: cfg.Logger}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("create nats server: %w", err)
	}
	debug := cfg.Logger != nil && cfg.Logger.Enabled(context.Background(), slog.LevelDebug)
	s.SetLoggerV2(log, debug, false, false)
	s.Start()

	timeout := cfg.ReadyTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	// The server reports a failed start (a port in use, an unusable store) only through its
	// logger's Fatalf, so wait in short steps and give up at the first fatal line.
	deadline := time.Now().Add(timeout)
	for !s.ReadyForConnections(50 * time.Millisecond) {
		if err := log.fatal(); err != nil || time.Now().After(deadline) {
			s.Shutdown()
			s.WaitForShutdown()
			if err == nil {
				err = fmt.Errorf("not ready after %v", timeout)
			}
			return nil, fmt.Errorf("start nats server: %w", err)
		}
	}
	if !s.JetStreamEnabled() {
		s.Shutdown()
		s.WaitForShutdown()
		return nil, fmt.Errorf("start nats server: jetstream not enabled: %v", log.fatal())
	}
	return s, nil
}

// Addr returns the host:port the server listens on.
func Addr(s *server.Server) (*net.TCPAddr, error) {
	a, ok := s.Addr().(*net.TCPAddr)
	if !ok {
		return nil, errors.New("nats server has no TCP listener")
	}
	return a, nil
}

// Options translates cfg into server options.
func Options(cfg Config) (*server.Options, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("nats server options: store dir is empty")
	}
	opts := &server.Options{}
	if len(cfg.Accounts) > 0 {
		// Accounts with JetStream cannot be enabled through exported Options fields; the
		// configuration language (a superset of JSON) can.
		conf, err := accountsConfig(cfg.Accounts)
		if err != nil {
			return nil, err
		}
		if err := opts.ProcessConfigString(conf); err != nil {
			return nil, fmt.Errorf("nats server options: accounts: %w", err)
		}
	}
	opts.ServerName = cfg.ServerName
	opts.Host = cfg.Host
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	opts.Port = cfg.Port
	if opts.Port == 0 {
		opts.Port = server.RANDOM_PORT
	}
	opts.JetStream = true
	opts.StoreDir = cfg.StoreDir
	opts.SyncAlways = cfg.SyncAlways
	opts.MaxPayload = cfg.MaxPayload
	if cfg.MaxStore > 0 {
		opts.JetStreamMaxStore = cfg.MaxStore
	}
	opts.NoSigs = true // the embedding process owns its signals
	opts.NoLog = cfg.Logger == nil
	opts.DisableJetStreamBanner = true
	if c := cfg.Cluster; c != nil {
		if c.Name == "" || cfg.ServerName == "" {
			return nil, errors.New("nats server options: a cluster node needs a cluster name and a server name")
		}
		opts.Cluster.Name, opts.Cluster.Host, opts.Cluster.Port = c.Name, c.Host, c.Port
		if opts.Cluster.Host == "" {
			opts.Cluster.Host = "127.0.0.1"
		}
		if opts.Cluster.Port == 0 {
			opts.Cluster.Port = server.RANDOM_PORT
		}
		opts.Routes = server.RoutesFromStr(strings.Join(c.Routes, ","))
	}
	if cfg.TLS != nil {
		opts.TLS = true
		opts.TLSConfig = cfg.TLS
		opts.TLSTimeout = 5
	}
	return opts, nil
}

// accountsConfig writes accts in the server's configuration language. It is close to JSON,
// but its strings know only the escapes \t \n \r \" \\ and \xXX, so they are quoted here
// rather than with encoding/json (which writes \u escapes).
func accountsConfig(accts []Account) (string, error) {
	var b strings.Builder
	list := func(subjects []string) {
		b.WriteByte('[')
		for i, s := range subjects {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(confQuote(s))
		}
		b.WriteByte(']')
	}
	perm := func(name string, p *Permission) {
		if p == nil {
			return
		}
		b.WriteString(name + ":{allow:")
		list(p.Allow)
		b.WriteString(",deny:")
		list(p.Deny)
		b.WriteString("},")
	}
	seen := map[string]bool{}
	b.WriteString("accounts:{")
	for _, a := range accts {
		if a.Name == "" {
			return "", errors.New("nats server options: account without a name")
		}
		if seen[a.Name] {
			return "", fmt.Errorf("nats server options: account %q twice", a.Name)
		}
		seen[a.Name] = true
		js := "disabled"
		if a.JetStream {
			js = "enabled"
		}
		b.WriteString(confQuote(a.Name) + ":{jetstream:" + js + ",users:[")
		for i, u := range a.Users {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString("{user:" + confQuote(u.Name) + ",password:" + confQuote(u.Password))
			if u.Publish != nil || u.Subscribe != nil || u.AllowResponses {
				b.WriteString(",permissions:{")
				perm("publish", u.Publish)
				perm("subscribe", u.Subscribe)
				fmt.Fprintf(&b, "allow_responses:%t}", u.AllowResponses)
			}
			b.WriteByte('}')
		}
		b.WriteString("]},")
	}
	b.WriteString("}")
	return b.String(), nil
}

func confQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, "\\x%02x", c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// logger adapts the server's printf logger to slog and remembers the first fatal line.
type logger struct {
	log *slog.Logger

	mu        sync.Mutex
	fatalText string
}

func (l *logger) fatal() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fatalText == "" {
		return nil
	}
	return errors.New(l.fatalText)
}

func (l *logger) emit(level slog.Level, format string, v []any) {
	if l.log != nil {
		l.log.Log(context.Background(), level, "nats server", "line", fmt.Sprintf(format, v...))
	}
}

func (l *logger) Noticef(format string, v ...any) { l.emit(slog.LevelInfo, format, v) }
func (l *logger) Warnf(format string, v ...any)   { l.emit(slog.LevelWarn, format, v) }
func (l *logger) Errorf(format string, v ...any)  { l.emit(slog.LevelError, format, v) }
func (l *logger) Debugf(format string, v ...any)  { l.emit(slog.LevelDebug, format, v) }
func (l *logger) Tracef(format string, v ...any)  { l.emit(slog.LevelDebug-4, format, v) }

// Fatalf records the failure instead of exiting: the embedding process decides what a failed
// server means.
func (l *logger) Fatalf(format string, v ...any) {
	l.mu.Lock()
	if l.fatalText == "" {
		l.fatalText = fmt.Sprintf(format, v...)
	}
	l.mu.Unlock()
	l.emit(slog.LevelError, format, v)
}
