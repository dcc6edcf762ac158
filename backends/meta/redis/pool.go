package redismeta

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// PoolOptions configure a Pool.
type PoolOptions struct {
	// Defaults is the template of every store's connection: ACL credentials, TLS material,
	// timeouts and pool sizes. What a store's URI states overrides it (see ApplyURI).
	Defaults ConnOptions
	// URIs maps store names to URIs and wins over URIs learned from the registry, e.g. to
	// reach a store through another address than the one KVCM uses.
	URIs map[string]string
	// Store configures every store opened (dry-run, logger).
	Store StoreOptions
	// Logger receives a line per store opened; nil discards.
	Logger *slog.Logger
}

// Pool is a meta.StoreResolver that opens one Store per store name on first use and keeps
// it. A name resolves, in this order, to the configured URI (PoolOptions.URIs), the URI
// learned from the registry (Learn), or "redis://<name>" with the Defaults (credentials, TLS).
// A learned URI with KVCMURIPrefix came from KVCM's registry and is read as KVCM reads it
// (ApplyKVCMURI: any scheme, plain TCP unless the Defaults enable TLS, the database KVCM
// selects); every other URI is kvcm-gc's own and read strictly (ApplyURI). Each store is
// opened with StoreOptions.DB set to its connection's database.
type Pool struct {
	o   PoolOptions
	log *slog.Logger

	mu      sync.Mutex
	learned map[string]string
	stores  map[string]*Store
	closed  bool
}

var _ meta.StoreResolver = (*Pool)(nil)

// NewPool returns an empty pool; nothing is opened until Store is called.
func NewPool(o PoolOptions) *Pool {
	if o.Store.Logger == nil {
		o.Store.Logger = o.Logger
	}
	return &Pool{
		o:       o,
		log:     orDiscard(o.Logger),
		learned: make(map[string]string),
		stores:  make(map[string]*Store),
	}
}

// Learn records the URI behind a store name, as read from the registry
// (RegistryOptions.Learn): KVCMURIPrefix and the registry's URI, or a configured override
// URI. A store already open keeps its connection: a changed URI (a rotated password) takes
// effect for a name only once the pool is rebuilt.
//
// A registry URI carries KVCM's own credentials, if any. The store is then signed in to with
// the Defaults' credentials where there are some (ApplyKVCMURI), and the first time a name is
// learned, or its URI changes, a line says which credentials are used: KVCM's, only where
// kvcm-gc was given none of its own, is a warning, since they carry KVCM's rights.
func (p *Pool) Learn(name, uri string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old, ok := p.learned[name]
	if ok && old != uri {
		_, open := p.stores[name]
		p.log.Warn("metadata store uri changed", "store", name, "uri", Redact(uri), "open", open)
	}
	if !ok || old != uri {
		p.logCredentials(name, uri)
	}
	p.learned[name] = uri
}

func (p *Pool) logCredentials(name, uri string) {
	kvcmURI, fromKVCM := strings.CutPrefix(uri, KVCMURIPrefix)
	if _, configured := p.o.URIs[name]; !fromKVCM || configured {
		return
	}
	u, err := kvcm.ParseStoreURI(kvcmURI)
	if err != nil || u.UserInfo == "" {
		return
	}
	if p.o.Defaults.HasCredentials() {
		p.log.Info("metadata store uri holds kvcm's credentials; signing in as kvcm-gc's own user", "store", name)
		return
	}
	p.log.Warn("signing in with kvcm's credentials from the registry, with kvcm's rights: "+
		"set meta.username and meta.password to a least-privilege user", "store", name)
}

// ConnOptions returns the connection options the pool would use for a store name.
func (p *Pool) ConnOptions(name string) (ConnOptions, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.connOptionsLocked(name)
}

func (p *Pool) connOptionsLocked(name string) (ConnOptions, error) {
	if name == "" {
		return ConnOptions{}, errors.New("empty metadata store name")
	}
	uri, ok := p.o.URIs[name]
	if !ok {
		uri, ok = p.learned[name]
		if kvcmURI, fromKVCM := strings.CutPrefix(uri, KVCMURIPrefix); ok && fromKVCM {
			conn, err := p.o.Defaults.ApplyKVCMURI(kvcmURI)
			if err != nil {
				return ConnOptions{}, fmt.Errorf("metadata store %q: %w", name, err)
			}
			return conn, nil
		}
	}
	if !ok {
		scheme := "redis://"
		if p.o.Defaults.TLS.Enabled {
			scheme = "rediss://"
		}
		uri = scheme + name
	}
	conn, err := p.o.Defaults.ApplyURI(uri)
	if err != nil {
		return ConnOptions{}, fmt.Errorf("metadata store %q: %w", name, err)
	}
	return conn, nil
}

// storeOptions are the options of the store opened on conn: the pool's, with the database
// the connection selects, so the store knows which of the server's databases it reads.
func (p *Pool) storeOptions(conn ConnOptions) StoreOptions {
	o := p.o.Store
	o.DB = conn.DB
	return o
}

// Store implements meta.StoreResolver.
func (p *Pool) Store(name string) (meta.Store, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, fmt.Errorf("metadata store %q: pool closed", name)
	}
	if s, ok := p.stores[name]; ok {
		p.mu.Unlock()
		return s, nil
	}
	conn, err := p.connOptionsLocked(name)
	if err != nil {
		p.mu.Unlock()
		return nil, err
	}
	c, err := NewClient(conn)
	if err != nil {
		p.mu.Unlock()
		return nil, fmt.Errorf("metadata store %q: %w", name, err)
	}
	s := newStore(c, p.storeOptions(conn))
	p.stores[name] = s
	p.mu.Unlock()

	p.log.Info("metadata store opened", "store", name, "uri", conn.String(), "db", conn.DB, "dry_run", p.o.Store.DryRun)
	if !p.o.Store.DryRun {
		// Outside the lock: a store that is down must not stall lookups of the others.
		timeout := conn.Timeout
		if timeout <= 0 {
			timeout = DefaultTimeout
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := s.LoadScripts(ctx); err != nil {
			p.log.Debug("script load failed, falling back to eval", "store", name, "err", err)
		}
	}
	return s, nil
}

// Close closes every store opened; later Store calls fail.
func (p *Pool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	var errs []error
	for name, s := range p.stores {
		if err := s.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close metadata store %q: %w", name, err))
		}
	}
	clear(p.stores)
	return errors.Join(errs...)
}
