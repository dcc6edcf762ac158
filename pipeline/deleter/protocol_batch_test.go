package deleter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/conformance/metatest"
)

// spyStore records the batch calls the deleter makes and lets a test act between them.
type spyStore struct {
	meta.Store
	calls []string // "get:<n>", "cas:<n>", "cad:<n>" with the number of items
	gets  int
	// afterGet runs after the n-th ReadBlocks (1-based).
	afterGet func(n int)
	// afterCAS runs after every CAS batch.
	afterCAS func()
	// write, when it returns non-nil for an item, is that item's error and the item is not sent.
	write func(op string, w meta.CondWrite) error
	// lost makes a whole batch of that op ("cas", "cad") go unanswered, after it ran.
	lost string
}

func (s *spyStore) ReadBlocks(ctx context.Context, inst string, keys []int64) ([]meta.BlockRead, error) {
	s.calls = append(s.calls, fmt.Sprintf("get:%d", len(keys)))
	out, err := s.Store.ReadBlocks(ctx, inst, keys)
	s.gets++
	if s.afterGet != nil {
		s.afterGet(s.gets)
	}
	return out, err
}

func (s *spyStore) many(ctx context.Context, op, inst string, ws []meta.CondWrite) ([]meta.CADResult, error) {
	s.calls = append(s.calls, fmt.Sprintf("%s:%d", op, len(ws)))
	res := make([]meta.CADResult, len(ws))
	var send []meta.CondWrite
	var idx []int
	for i, w := range ws {
		if s.write != nil {
			if res[i].Err = s.write(op, w); res[i].Err != nil {
				continue
			}
		}
		send = append(send, w)
		idx = append(idx, i)
	}
	var got []meta.CADResult
	if op == "cas" {
		errs, err := s.Store.CASMany(ctx, inst, send)
		if err != nil {
			return nil, err
		}
		for _, e := range errs {
			got = append(got, meta.CADResult{Err: e})
		}
		if s.afterCAS != nil {
			defer s.afterCAS()
		}
	} else {
		var err error
		if got, err = s.Store.CADMany(ctx, inst, send); err != nil {
			return nil, err
		}
	}
	for j, i := range idx {
		res[i] = got[j]
	}
	if s.lost == op {
		return nil, errors.New("connection reset")
	}
	return res, nil
}

func (s *spyStore) CASMany(ctx context.Context, inst string, ws []meta.CondWrite) ([]error, error) {
	return metatest.CADErrs(s.many(ctx, "cas", inst, ws))
}

func (s *spyStore) CADMany(ctx context.Context, inst string, ws []meta.CondWrite) ([]meta.CADResult, error) {
	return s.many(ctx, "cad", inst, ws)
}

// dloc is a location with one file spec (or none when path is "").
func dloc(id string, st kvcm.Status, path string) string {
	if path == "" {
		return fmt.Sprintf(`{"id":%q,"status":%d,"type":4,"spec_size":0,"location_specs":[]}`, id, st)
	}
	return fmt.Sprintf(`{"id":%q,"status":%d,"type":4,"spec_size":1,"location_specs":[{"name":"tp0","uri":"file://nfs%s?size=1"}],"zz":"&<"}`, id, st, path)
}

func dblock(locs ...string) string {
	var parts []string
	for _, l := range locs {
		id := strings.SplitN(l, `"`, 5)[3]
		parts = append(parts, fmt.Sprintf("%q:%s", id, l))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func deleting(t *testing.T, l string) string {
	d, err := kvcm.LocationWithStatus([]byte(l), kvcm.StatusDeleting)
	require.NoError(t, err)
	return string(d)
}

func outcomes(res []TargetResult) []string {
	out := make([]string, len(res))
	for i, r := range res {
		out[i] = r.Outcome
	}
	return out
}

// TestDeleteAllOneRoundTripPerStep: a request over many blocks, several targets per block and
// every kind of outcome, runs as one read, one CAS batch, one re-read and one CAD batch, with
// one write per block.
func TestDeleteAllOneRoundTripPerStep(t *testing.T) {
	f := newDeleterFixture(t, false)
	var targets []subjects.Target
	var files []string
	const n = 20
	for k := range int64(n) {
		pa, pb := f.file(fmt.Sprintf("a%d", k)), f.file(fmt.Sprintf("b%d", k))
		files = append(files, pa, pb)
		a, b, live := dloc("a", kvcm.StatusWriting, pa), dloc("b", kvcm.StatusServing, pb), dloc("live", kvcm.StatusServing, "")
		if k%2 == 0 {
			f.put(k, dblock(a, b, live)) // two targets of one block, one location stays
		} else {
			f.put(k, dblock(b, a)) // both locations go: the key goes
		}
		targets = append(targets, target(k, "a", a), target(k, "b", b))
	}
	spy := &spyStore{Store: f.store}
	res, err := NewProtocol(DefaultConfig()).DeleteAll(context.Background(), spy, f.set, "i", targets)
	require.NoError(t, err)
	for i, r := range res {
		require.Equal(t, subjects.OutcomeDeleted, r.Outcome, "target %d: %s", i, r.Detail)
		require.Equal(t, targets[i], r.Target)
		require.False(t, r.Resumed)
	}
	require.Equal(t, []string{"get:20", "cas:20", "get:20", "cad:20"}, spy.calls)
	for _, p := range files {
		require.NoFileExists(t, p)
	}
	for k := range int64(n) {
		if k%2 == 0 {
			require.Equal(t, map[string]string{"__uri__": dblock(dloc("live", kvcm.StatusServing, "")), "__lru_time__": "123", "_prev_key_": ""}, f.get(k))
		} else {
			f.requireKeptEmpty(k)
		}
	}
}

// TestDeleteAllOutcomes: each target of one request gets its own outcome, and only the
// ones that pass every check lose data or metadata.
func TestDeleteAllOutcomes(t *testing.T) {
	f := newDeleterFixture(t, false)
	pDel, pRes, pMis, pShared := f.file("del"), f.file("res"), f.file("mis"), f.file("shared")
	del := dloc("d", kvcm.StatusWriting, pDel)
	res := dloc("r", kvcm.StatusServing, pRes)
	mis := dloc("m", kvcm.StatusWriting, pMis)
	misNow := dloc("m", kvcm.StatusServing, pMis) // FinishWrite since the probe
	shared := `{"id":"s","status":2,"type":4,"spec_size":1,"location_specs":[{"name":"tp0","uri":"file://nfs` + pShared + `?blkid=2&size=1"}]}`
	other := `{"id":"x","status":3,"type":4,"spec_size":0,"location_specs":[],"by":"reclaimer"}`
	f.put(1, dblock(del, deleting(t, res), misNow))
	f.put(2, dblock(shared))
	f.put(3, `{"broken":`)
	f.put(4, dblock(`{"id":"x","status":4,"type":4,"spec_size":0,"location_specs":[],"by":"other"}`))
	targets := []subjects.Target{
		target(1, "d", del),
		target(1, "r", res),             // our DELETING from an earlier delivery
		target(1, "m", mis),             // changed since the probe
		target(1, "gone", del),          // no such location
		target(2, "s", shared),          // shared file
		target(3, "a", del),             // corrupt block
		target(4, "x", other),           // someone else's DELETING
		target(5, "a", del),             // no such block
		target(1, "d", del),             // the same target twice
		target(6, "bad", `{"id":"bad"`), // expected bytes unusable
	}
	got, err := NewProtocol(DefaultConfig()).DeleteAll(context.Background(), f.store, f.set, "i", targets)
	require.NoError(t, err)
	require.Equal(t, []string{subjects.OutcomeDeleted, subjects.OutcomeDeleted, subjects.OutcomeNoopMismatch, subjects.OutcomeNoopGone,
		subjects.OutcomeDeleted, subjects.OutcomeNoopMismatch, subjects.OutcomeNoopMismatch, subjects.OutcomeNoopGone,
		subjects.OutcomeNoopGone, subjects.OutcomeNoopMismatch}, outcomes(got))
	require.True(t, got[1].Resumed)
	require.False(t, got[0].Resumed)
	require.Equal(t, map[string]int{PhysSkipShared: 1}, got[4].PhysicalSkips)
	require.NoFileExists(t, pDel)
	require.NoFileExists(t, pRes)
	require.FileExists(t, pMis)
	require.FileExists(t, pShared, "a shared file is never unlinked")
	require.Equal(t, dblock(misNow), f.get(1)["__uri__"])
	f.requireKeptEmpty(2)
	require.Equal(t, `{"broken":`, f.get(3)["__uri__"])
}

// TestDeleteAllConflictRetriesOnlyConflicting: a conflicting CAS re-reads and retries its own
// block only, CASRetries times in all; the other blocks are done meanwhile.
func TestDeleteAllConflictRetriesOnlyConflicting(t *testing.T) {
	f := newDeleterFixture(t, false)
	var targets []subjects.Target
	for k := range int64(4) {
		l := dloc("a", kvcm.StatusWriting, "")
		f.put(k, dblock(l, dloc("b", kvcm.StatusServing, "")))
		targets = append(targets, target(k, "a", l))
	}
	conflicts := map[int64]int{1: 2, 2: 100} // block 1 wins on the third attempt, block 2 never
	spy := &spyStore{Store: f.store, write: func(op string, w meta.CondWrite) error {
		if op == "cas" && conflicts[w.BlockKey] > 0 {
			conflicts[w.BlockKey]--
			return meta.ErrConflict
		}
		return nil
	}}
	res, err := NewProtocol(DefaultConfig()).DeleteAll(context.Background(), spy, f.set, "i", targets)
	require.NoError(t, err)
	require.Equal(t, []string{subjects.OutcomeDeleted, subjects.OutcomeDeleted, subjects.OutcomeNoopMismatch, subjects.OutcomeDeleted}, outcomes(res))
	require.Equal(t, "CAS conflict 3 times", res[2].Detail)
	require.Equal(t, []string{"get:4", "cas:4", "get:2", "cas:2", "get:2", "cas:2", "get:3", "cad:3"}, spy.calls)
	require.Equal(t, dblock(dloc("a", kvcm.StatusWriting, ""), dloc("b", kvcm.StatusServing, "")), f.get(2)["__uri__"], "a lost block is untouched")
	require.Equal(t, dblock(dloc("b", kvcm.StatusServing, "")), f.get(1)["__uri__"])
}

// TestDeleteAllMarkLostDuringDelay: KVCM's FinishWrite over one of our marks during the delay:
// that location keeps its data and its new bytes; the other target of the block is deleted.
func TestDeleteAllMarkLostDuringDelay(t *testing.T) {
	f := newDeleterFixture(t, false)
	pa, pb := f.file("a"), f.file("b")
	a, b := dloc("a", kvcm.StatusWriting, pa), dloc("b", kvcm.StatusWriting, pb)
	f.put(1, dblock(a, b))
	p := NewProtocol(DefaultConfig())
	servingA := dloc("a", kvcm.StatusServing, pa)
	// The FinishWrite lands between our CAS and the re-read: during the delay.
	st := &waitHook{spyStore: &spyStore{Store: f.store}, before: func() { f.put(1, dblock(servingA, deleting(t, b))) }}
	res, err := p.DeleteAll(context.Background(), st, f.set, "i", []subjects.Target{target(1, "a", a), target(1, "b", b)})
	require.NoError(t, err)
	require.Equal(t, []string{subjects.OutcomeNoopMismatch, subjects.OutcomeDeleted}, outcomes(res))
	require.Equal(t, "location changed after CAS; data left in place", res[0].Detail)
	require.FileExists(t, pa)
	require.NoFileExists(t, pb)
	require.Equal(t, dblock(servingA), f.get(1)["__uri__"])
}

// waitHook runs before once, just before the second batch read (the re-read after the delay).
type waitHook struct {
	*spyStore
	before func()
	n      int
}

func (w *waitHook) ReadBlocks(ctx context.Context, inst string, keys []int64) ([]meta.BlockRead, error) {
	if w.n++; w.n == 2 {
		w.before()
	}
	return w.spyStore.ReadBlocks(ctx, inst, keys)
}

// TestDeleteAllCADConflict: a block changed between the re-read and the CAD. A new location
// of KVCM is kept; a block someone else emptied is their removal, a no-op; our mark replaced after
// the unlink is left as it is.
func TestDeleteAllCADConflict(t *testing.T) {
	f := newDeleterFixture(t, false)
	a := dloc("a", kvcm.StatusWriting, "")
	newcomer := dloc("n", kvcm.StatusWriting, "")
	for k := range int64(3) {
		f.put(k, dblock(a))
	}
	st := &waitHook{spyStore: &spyStore{Store: f.store}}
	st.before = func() {
		st.afterGet = func(n int) {
			if n != 2 {
				return
			}
			f.put(0, dblock(deleting(t, a), newcomer))
			require.NoError(t, f.r.Client().Del(context.Background(), kvcm.BlockKey("i", 1)).Err())
			f.put(2, dblock(dloc("a", kvcm.StatusServing, "")))
		}
	}
	res, err := NewProtocol(DefaultConfig()).DeleteAll(context.Background(), st, f.set, "i",
		[]subjects.Target{target(0, "a", a), target(1, "a", a), target(2, "a", a)})
	require.NoError(t, err)
	require.Equal(t, []string{subjects.OutcomeDeleted, subjects.OutcomeNoopGone, subjects.OutcomeNoopMismatch}, outcomes(res))
	require.Equal(t, "gone before our CAD: another delete removed it", res[1].Detail)
	require.Equal(t, "location changed after CAS", res[2].Detail)
	require.Equal(t, []string{"get:3", "cas:3", "get:3", "cad:3", "get:3", "cad:1"}, st.calls)
	require.Equal(t, dblock(newcomer), f.get(0)["__uri__"])
	require.Empty(t, f.get(1), "someone else deleted it")
	require.Equal(t, dblock(dloc("a", kvcm.StatusServing, "")), f.get(2)["__uri__"])
}

// TestDeleteAllTransientResumes: a CAD batch without an answer fails the request (to be
// redelivered); the redelivery resumes from our DELETING marks and finishes (invariant 6).
func TestDeleteAllTransientResumes(t *testing.T) {
	f := newDeleterFixture(t, false)
	pa, pb := f.file("a"), f.file("b")
	a, b := dloc("a", kvcm.StatusWriting, pa), dloc("b", kvcm.StatusWriting, pb)
	f.put(1, dblock(a))
	f.put(2, dblock(b, dloc("c", kvcm.StatusServing, "")))
	targets := []subjects.Target{target(1, "a", a), target(2, "b", b)}
	spy := &spyStore{Store: f.store, write: func(op string, w meta.CondWrite) error {
		if op == "cad" {
			return errors.New("OOM command not allowed")
		}
		return nil
	}}
	res, err := NewProtocol(DefaultConfig()).DeleteAll(context.Background(), spy, f.set, "i", targets)
	require.Error(t, err)
	require.ErrorContains(t, err, "cad block 1")
	require.Equal(t, []string{subjects.OutcomeError, subjects.OutcomeError}, outcomes(res))
	require.Equal(t, dblock(deleting(t, a)), f.get(1)["__uri__"])

	res, err = NewProtocol(DefaultConfig()).DeleteAll(context.Background(), f.store, f.set, "i", targets)
	require.NoError(t, err)
	require.Equal(t, []string{subjects.OutcomeDeleted, subjects.OutcomeDeleted}, outcomes(res))
	require.True(t, res[0].Resumed)
	require.True(t, res[1].Resumed)
	f.requireKeptEmpty(1)
	require.Equal(t, dblock(dloc("c", kvcm.StatusServing, "")), f.get(2)["__uri__"])

	// A CAS batch whose answer is lost after it ran: error now, resumed on the redelivery.
	f.put(3, dblock(a))
	pa = f.file("a3")
	a = dloc("a", kvcm.StatusWriting, pa)
	f.put(3, dblock(a))
	targets[0] = target(3, "a", a)
	spy = &spyStore{Store: f.store, lost: "cas"}
	res, err = NewProtocol(DefaultConfig()).DeleteAll(context.Background(), spy, f.set, "i", targets[:1:1])
	require.Error(t, err)
	require.Equal(t, subjects.OutcomeError, res[0].Outcome)
	require.Equal(t, []string{"get:1", "cas:1"}, spy.calls, "nothing unlinked or removed without an answer")
	require.FileExists(t, pa)
	res, err = NewProtocol(DefaultConfig()).DeleteAll(context.Background(), f.store, f.set, "i", targets[:1:1])
	require.NoError(t, err)
	require.True(t, res[0].Resumed)
	require.Equal(t, subjects.OutcomeDeleted, res[0].Outcome)
	require.NoFileExists(t, pa)
}

// TestDeleteAllWaitCancelled: a request cancelled during delete_delay unlinks nothing and
// leaves its marks for the redelivery.
func TestDeleteAllWaitCancelled(t *testing.T) {
	f := newDeleterFixture(t, false)
	pa := f.file("a")
	a := dloc("a", kvcm.StatusWriting, pa)
	f.put(1, dblock(a))
	f.put(2, dblock(dloc("b", kvcm.StatusServing, "")))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := DefaultConfig()
	cfg.DeleteDelay = time.Hour
	// Cancelled once the mark is stored: the protocol is then waiting delete_delay.
	marked := dblock(deleting(t, a))
	go func() {
		for ctx.Err() == nil && f.r.Client().HGet(context.Background(), kvcm.BlockKey("i", 1), "__uri__").Val() != marked {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
	}()
	res, err := NewProtocol(cfg).DeleteAll(ctx, f.store, f.set, "i", []subjects.Target{target(1, "a", a), target(2, "x", a)})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, []string{subjects.OutcomeError, subjects.OutcomeNoopGone}, outcomes(res))
	require.FileExists(t, pa)
	require.Equal(t, dblock(deleting(t, a)), f.get(1)["__uri__"])
}

// TestDeleteAllDryRun: every check runs, the store refuses every CAS, nothing changes.
func TestDeleteAllDryRun(t *testing.T) {
	f := newDeleterFixture(t, true)
	pa, pb := f.file("a"), f.file("b")
	a, b := dloc("a", kvcm.StatusWriting, pa), dloc("b", kvcm.StatusWriting, pb)
	f.put(1, dblock(a, b))
	f.put(2, dblock(b))
	before1, before2 := f.get(1), f.get(2)
	spy := &spyStore{Store: f.store}
	res, err := NewProtocol(DefaultConfig()).DeleteAll(context.Background(), spy, f.set, "i",
		[]subjects.Target{target(1, "a", a), target(1, "b", b), target(2, "b", b), target(2, "z", b)})
	require.NoError(t, err)
	require.Equal(t, []string{subjects.OutcomeWouldDelete, subjects.OutcomeWouldDelete, subjects.OutcomeWouldDelete, subjects.OutcomeNoopGone}, outcomes(res))
	require.Equal(t, []string{"get:2", "cas:2"}, spy.calls)
	require.Equal(t, before1, f.get(1))
	require.Equal(t, before2, f.get(2))
	require.FileExists(t, pa)
	require.FileExists(t, pb)
}

// TestDeleteAllCombinedCASBytes: two targets of one block make one CAS whose value changes
// both status tokens and nothing else.
func TestDeleteAllCombinedCASBytes(t *testing.T) {
	f := newDeleterFixture(t, false)
	a, b, c := dloc("a", kvcm.StatusWriting, ""), dloc("b", kvcm.StatusServing, ""), dloc("c", kvcm.StatusServing, "")
	f.put(1, dblock(a, c, b))
	var written []string
	spy := &spyStore{Store: f.store, write: func(op string, w meta.CondWrite) error {
		written = append(written, op+" "+string(w.Next))
		if op == "cad" {
			return errors.New("stop here")
		}
		return nil
	}}
	_, err := NewProtocol(DefaultConfig()).DeleteAll(context.Background(), spy, f.set, "i", []subjects.Target{target(1, "b", b), target(1, "a", a)})
	require.Error(t, err)
	require.Equal(t, []string{
		"cas " + dblock(deleting(t, a), c, deleting(t, b)),
		"cad " + dblock(c),
	}, written)
}

// TestCellStates: a read cell says what it found, and only a decoded one lets its targets be
// judged any further.
func TestCellStates(t *testing.T) {
	a := dloc("a", kvcm.StatusWriting, "")
	legacy := func() *reqCell { return &reqCell{key: 1, layout: kvcm.LayoutLegacy} }
	for _, tc := range []struct {
		name  string
		entry meta.Entry
		want  cellState
	}{
		{"key gone", meta.Entry{Layout: kvcm.LayoutNone}, cellGone},
		{"other layout", meta.Entry{Layout: kvcm.LayoutLocation, Locations: []meta.Field{{ID: "a", Value: []byte(a)}}}, cellChanged},
		{"corrupt", meta.Entry{Layout: kvcm.LayoutLegacy, URI: []byte(`{"a":`)}, cellCorrupt},
		{"decoded", meta.Entry{Layout: kvcm.LayoutLegacy, URI: []byte(dblock(a))}, cellDecoded},
	} {
		c := legacy()
		require.Equal(t, cellUnread, c.state, tc.name)
		c.load(&tc.entry)
		require.Equal(t, tc.want, c.state, tc.name)
		require.Equal(t, tc.want == cellDecoded, c.val != nil, tc.name)
	}
}
