package testenv

import (
	"context"
	"testing"

	"github.com/kvcm-gc/kvcm-gc/tools/servers"
)

// Integration tests run against a real redis-server rather than a fake: what kvcm-gc must get
// right (glob-escaped SCAN patterns, Lua byte comparisons, ACL read-only users, NOAUTH-driven
// AUTH) is exactly what fakes get subtly wrong.

// RedisOption configures StartRedis.
type RedisOption = servers.RedisOption

// WithRedisPersistence turns on the append-only file with fsync on every write, so data
// survives Restart and even Kill (SIGKILL). The default is no persistence at all.
func WithRedisPersistence() RedisOption { return servers.WithRedisPersistence() }

// WithRedisTLS makes the server accept TLS connections only (the plain port is disabled).
// Client certificates are optional; add WithRedisArgs("--tls-auth-clients", "yes") to require
// them (a later argument overrides an earlier one).
func WithRedisTLS(files RedisTLSFiles) RedisOption { return servers.WithRedisTLS(files) }

// WithRedisArgs appends raw redis-server command-line arguments ("--maxmemory", "10mb").
func WithRedisArgs(args ...string) RedisOption { return servers.WithRedisArgs(args...) }

// Redis is a redis-server child process of one test (servers.Redis), with the methods that
// can fail taking the test to fail. Its methods are safe for concurrent use.
type Redis struct {
	*servers.Redis
}

// StartRedis starts a redis-server for a test or benchmark in a temporary directory of t and
// stops it at t.Cleanup. A missing redis-server binary fails the test (it never skips):
// integration tests that silently do not run are worse than a clear failure.
func StartRedis(t testing.TB, opts ...RedisOption) *Redis {
	t.Helper()
	r, err := servers.StartRedis(t.TempDir(), opts...)
	if err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("stop redis-server: %v", err)
		}
	})
	return &Redis{Redis: r}
}

// Restart stops the server if it runs and starts it again on the same port and directory,
// with the ACL users and the password set through AddUser and RequirePass.
func (r *Redis) Restart(t testing.TB) {
	t.Helper()
	if err := r.Redis.Restart(); err != nil {
		t.Fatalf("restart redis-server: %v", err)
	}
}

// AddUser creates (or resets) the ACL user name with password pass and the given ACL rules,
// for example AddUser(t, "scanner", "pw", "~*", "+scan", "+hmget"); see servers.Redis.AddUser.
func (r *Redis) AddUser(t testing.TB, name, pass string, rules ...string) {
	t.Helper()
	if err := r.Redis.AddUser(context.Background(), name, pass, rules...); err != nil {
		t.Fatal(err)
	}
}

// RequirePass sets the default user's password; see servers.Redis.RequirePass.
func (r *Redis) RequirePass(t testing.TB, pass string) {
	t.Helper()
	if err := r.Redis.RequirePass(context.Background(), pass); err != nil {
		t.Fatal(err)
	}
}

// CommandStats returns the number of calls per command since start, from INFO commandstats;
// see servers.Redis.CommandStats.
func (r *Redis) CommandStats(t testing.TB) map[string]int64 {
	t.Helper()
	stats, err := r.Redis.CommandStats(context.Background())
	if err != nil {
		t.Fatalf("read command stats: %v", err)
	}
	return stats
}

// RedisTLSFiles are PEM files of a throw-away CA, a server certificate for 127.0.0.1 and
// localhost, and a client certificate, all signed by that CA.
type RedisTLSFiles = servers.RedisTLSFiles

// NewRedisTLSFiles generates RedisTLSFiles in a new temporary directory of t. The
// certificates are valid for one day.
func NewRedisTLSFiles(t testing.TB) RedisTLSFiles {
	t.Helper()
	files, err := servers.GenerateRedisTLSFiles(t.TempDir())
	if err != nil {
		t.Fatalf("generate TLS files: %v", err)
	}
	return files
}
