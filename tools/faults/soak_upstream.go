package faults

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
)

// soakUpstream runs upstream KVCM's own GC (UpstreamGC) beside kvcm-gc for a whole soak run.
// It persists nothing, like KVCM's: around a Redis fault it is stopped, its delete requests in
// flight finished, and a new one started afterwards (a request cut by the restart could leave
// a DELETING of its own for good, which is upstream's, not the soak's, to answer for).
type soakUpstream struct {
	cfg UpstreamConfig

	mu      sync.Mutex
	cur     *UpstreamGC
	stop    context.CancelFunc
	done    chan struct{}
	removed int                  // by the instances stopped before cur
	gone    map[UpstreamRef]bool // the locations they removed
	touched map[string]bool      // legacy keys whose __lru_time__ it rewrote, by every instance
	errs    []error
}

// newSoakUpstream configures the emulator for the run: the seed's NFS storage holds files
// (its MightExist is a stat, as KVCM's HF3FS backend's, so it races kvcm-gc on
// storage-missing locations too), the shared one does not (KVCM's NFS backend: every URI
// might exist, a delete does nothing); its round pause is the stages'.
func newSoakUpstream(rdb redis.UniversalClient, layout kvcm.Layout, insts []string, grace, roundPause time.Duration) *soakUpstream {
	return &soakUpstream{cfg: UpstreamConfig{Store: rdb, Layout: layout, Instances: insts, OrphanGrace: grace, RoundPause: roundPause,
		Storages: map[string]UpstreamStorage{seed.StorageNFS: {Type: kvcm.TypeFile, Files: true}, seed.StorageShared: {Type: kvcm.TypeFile}}},
		touched: map[string]bool{}, gone: map[UpstreamRef]bool{}}
}

// start runs a new emulator until stop.
func (u *soakUpstream) start(ctx context.Context) error {
	g, err := NewUpstreamGC(u.cfg)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	u.mu.Lock()
	u.cur, u.stop, u.done = g, cancel, done
	u.mu.Unlock()
	go func() {
		defer close(done)
		g.Run(rctx)
	}()
	return nil
}

// halt stops the emulator and waits for its requests in flight.
func (u *soakUpstream) halt() {
	u.mu.Lock()
	g, stop, done := u.cur, u.stop, u.done
	u.mu.Unlock()
	if g == nil {
		return
	}
	stop()
	<-done
	u.mu.Lock()
	defer u.mu.Unlock()
	u.removed += g.Stats().Removed
	for ref := range g.Removed() {
		u.gone[ref] = true
	}
	for k := range g.Touched() {
		u.touched[k] = true
	}
	if err := g.Err(); err != nil {
		u.errs = append(u.errs, err)
	}
	u.cur = nil
}

// collected is the number of locations removed so far.
func (u *soakUpstream) collected() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := u.removed
	if u.cur != nil {
		n += u.cur.Stats().Removed
	}
	return n
}

// removedRef reports whether the emulator removed location ref.
func (u *soakUpstream) removedRef(ref UpstreamRef) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.gone[ref] {
		return true
	}
	return u.cur != nil && u.cur.Removed()[ref] > 0
}

// rewroteLRU reports whether the emulator has rewritten key's __lru_time__, or sent a rewrite
// of it (legacy layout).
func (u *soakUpstream) rewroteLRU(key string) bool {
	if u == nil || u.cfg.Layout != kvcm.LayoutLegacy {
		return false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.touched[key] {
		return true
	}
	if u.cur != nil {
		for k := range u.cur.Touched() {
			u.touched[k] = true
		}
	}
	return u.touched[key]
}

// takeProblems returns the emulator's own failures.
func (u *soakUpstream) takeProblems() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []string
	for _, err := range u.errs {
		out = append(out, err.Error())
	}
	u.errs = nil
	if u.cur != nil {
		if err := u.cur.Err(); err != nil {
			out = append(out, fmt.Sprintf("%v (so far)", err))
		}
	}
	return out
}

// judges reports whether upstream's GC may collect location l of field: the field is of its
// layout (L# fields for today's KVCM, __uri__ for the legacy one, in any key, an upgraded one
// too) and its orphan rule holds: WRITING, create_time past the grace, whatever the block's
// __lru_time__ (it reads none).
func (u *soakUpstream) judges(l *kvcm.Location, field string) bool {
	if u == nil || (field == kvcm.FieldURI) != (u.cfg.Layout == kvcm.LayoutLegacy) {
		return false
	}
	return l.Err == nil && l.Status == kvcm.StatusWriting && l.HasCreateTime && l.CreateTimeUs > 0 &&
		time.Since(time.UnixMicro(l.CreateTimeUs)) >= u.cfg.OrphanGrace
}

// inLayout reports whether field is one upstream's GC reads.
func (u *soakUpstream) inLayout(field string) bool {
	return u != nil && (field == kvcm.FieldURI) == (u.cfg.Layout == kvcm.LayoutLegacy)
}
