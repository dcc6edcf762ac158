package scanner

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
)

// The audit of KVCM's counters (DESIGN §13.4; pipeline/audit.go says what the range means and
// proves it). Every page the walk records adds its blocks to a recount per instance
// (kvcm.Recount: keys, and bytes by slot as KVCM's own URI parsing reads them, every location
// in any status); the round's running recount travels in the store's checkpoint, so a walk
// resumed elsewhere goes on counting. The audit reads every instance's persisted counters
// (one HGETALL of its metadata hash, all instances in one round trip) when the round starts,
// after each page read at most every auditReadGap, and, once the walk has read its last page,
// every auditReadGap until scanner.kvcm_persist_gap has passed since, the last of those
// readings being the round's End: KVCM persists at most every that long, so a change it made
// to a block the walk had already read is in End. The rises and falls between consecutive
// readings travel in the checkpoint too (pipeline.CounterMoves); the round's recount with its
// readings becomes the store's last audit, exported as kvcm_gc_kvcm_*_drift gauges. The
// audit only reads.

// maxAudit bounds the instances of a store the audit follows (the checkpoint carries each).
const maxAudit = 256

// auditReadGap is the least time between two readings of the persisted counters in a walk.
// KVCM persists at most once per persist_metadata_interval_time_ms (1s by default): reading
// more often sees nothing new, and four readings a persist keep the range's intervals within
// a quarter of one of KVCM's. A reading is one pipelined round trip of at most maxAudit
// HGETALLs of a two-field hash: at most 4 round trips a second per store, whatever the pace.
const auditReadGap = 250 * time.Millisecond

// auditRetries is how often a last reading that found no hash, or an unreadable field, is
// taken again, auditRetryGap apart: KVCM persists with DEL then HSET, and a read between the
// two finds nothing.
const (
	auditRetries  = 3
	auditRetryGap = 20 * time.Millisecond
)

// auditTally is a driver's recounts of pages scanned, and its readings of the persisted
// counters, that no checkpoint holds yet.
type auditTally struct {
	mu       sync.Mutex
	pending  []auditPage
	readings []auditReading // oldest first
	readAt   time.Time      // the last reading's time
	walkEnd  time.Time      // when the walk's last page was read (zero: not by this driver)
}

// auditReading is one reading of the round's instances' persisted counters, by instance.
type auditReading map[string]*pipeline.PersistedCounters

type auditPage struct {
	from, next uint64
	counts     map[string]*kvcm.Recount
}

// add remembers the recount of the page scanned from cursor from; a page scanned again from
// the same cursor replaces it.
func (t *auditTally) add(from, next uint64, counts map[string]*kvcm.Recount) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pending = slices.DeleteFunc(t.pending, func(p auditPage) bool { return p.from == from })
	t.pending = append(t.pending, auditPage{from: from, next: next, counts: counts})
}

// reset forgets every page and reading (a round starts or ends).
func (t *auditTally) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pending, t.readings, t.readAt, t.walkEnd = nil, nil, time.Time{}, time.Time{}
}

// due reports whether a reading at now is auditReadGap after the last.
func (t *auditTally) due(now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.readAt.IsZero() || now.Sub(t.readAt) >= auditReadGap
}

// read remembers a reading taken at now.
func (t *auditTally) read(r auditReading, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.readings = append(t.readings, r)
	t.readAt = now
}

// walked notes that the walk read its last page at now (again, when it was read again).
func (t *auditTally) walked(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.After(t.walkEnd) {
		t.walkEnd = now
	}
}

// takeReadings returns the readings no checkpoint holds yet, and forgets them: one that
// reaches no checkpoint (its write failed) only joins two intervals of the range.
func (t *auditTally) takeReadings() []auditReading {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.readings
	t.readings = nil
	return r
}

// apply adds the page checkpoint c records (its cursor is the page's next, or the walk is
// done) to the round's running recount, and the readings taken since the last checkpoint to
// its moves.
func (t *auditTally) apply(c pipeline.Checkpoint) pipeline.Checkpoint {
	if !c.InRound {
		return c
	}
	c.AuditRound = foldReadings(c.AuditRound, t.takeReadings())
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, p := range t.pending {
		if p.next == c.Cursor && (p.next != 0 || c.Walked) {
			c.AuditRound = mergeAudit(c.AuditRound, p.counts)
			t.pending = slices.Delete(t.pending, i, i+1)
			break
		}
	}
	return c
}

// foldReadings folds readings, oldest first, into a fresh copy of round.
func foldReadings(round []pipeline.AuditCount, readings []auditReading) []pipeline.AuditCount {
	if len(readings) == 0 {
		return round
	}
	out := slices.Clone(round)
	for _, r := range readings {
		for i := range out {
			out[i].Fold(r[out[i].Instance])
		}
	}
	return out
}

// auditPage recounts a page the walk read from cursor from, and reads the round's instances'
// persisted counters when the last reading is auditReadGap old.
func (d *walkDriver) auditPage(ctx context.Context, from uint64, page meta.Page) {
	now := d.s.now() // the page is read
	d.audit.add(from, page.Next, recountPage(page.Entries))
	if page.Next == 0 {
		d.audit.walked(now)
	}
	d.auditRead(ctx, now)
}

// auditRead reads the round's instances' persisted counters, at a page or a tick of the
// walk (a walk held by backpressure or a pause goes on reading: KVCM goes on writing), when
// the last reading is auditReadGap old.
func (d *walkDriver) auditRead(ctx context.Context, now time.Time) {
	if !d.w.ckpt.InRound || !d.audit.due(now) {
		return
	}
	ids := auditIDs(d.w.ckpt.AuditRound)
	if len(ids) == 0 {
		return
	}
	if r := d.metadataReader(); r != nil {
		d.audit.read(readAll(ctx, r, ids, now), now)
	}
}

func auditIDs(round []pipeline.AuditCount) []string {
	ids := make([]string, len(round))
	for i := range round {
		ids[i] = round[i].Instance
	}
	return ids
}

// recountPage recounts a page's blocks by instance.
func recountPage(entries []meta.Entry) map[string]*kvcm.Recount {
	out := map[string]*kvcm.Recount{}
	for i := range entries {
		e := &entries[i]
		r := out[e.Instance]
		if r == nil {
			r = kvcm.NewRecount()
			out[e.Instance] = r
		}
		r.AddBlock(e.Layout, e.URI, e, e.Others)
	}
	return out
}

// mergeAudit adds a page's recounts to the round's (a fresh slice). Only the instances the
// round started with are followed: the readings of one that joined later do not bound its
// recount, which missed the pages before it joined.
func mergeAudit(round []pipeline.AuditCount, page map[string]*kvcm.Recount) []pipeline.AuditCount {
	out := make([]pipeline.AuditCount, len(round))
	for i, a := range round {
		out[i] = a
		r := page[a.Instance]
		if r == nil {
			continue
		}
		out[i].Keys += r.Keys
		out[i].Locations += r.Locations
		out[i].Usage = maps.Clone(a.Usage)
		for s, b := range r.Usage {
			if b == 0 {
				continue
			}
			if out[i].Usage == nil {
				out[i].Usage = map[string]uint64{}
			}
			out[i].Usage[s.String()] += b // wraps, as KVCM's sum does
		}
		out[i].Inexact += r.VersionDependent + r.Bad + r.Corrupt
		for _, n := range r.Unparsed {
			out[i].Inexact += n
		}
	}
	return out
}

// auditStart is the round's audit as it starts: every instance of the round (at most
// maxAudit, by id), its group's quota, and its persisted counters read now, the first reading.
func (d *walkDriver) auditStart(
	ctx context.Context,
	instances map[string]meta.Instance,
	now time.Time,
) []pipeline.AuditCount {
	ids := slices.Sorted(maps.Keys(instances))
	if len(ids) > maxAudit {
		ids = ids[:maxAudit]
	}
	read := readAll(ctx, d.metadataReader(), ids, now)
	d.audit.reset()
	d.audit.mu.Lock()
	d.audit.readAt = now // the next reading is auditReadGap after this one
	d.audit.mu.Unlock()
	out := make([]pipeline.AuditCount, 0, len(ids))
	for _, id := range ids {
		a := pipeline.AuditCount{Instance: id, Start: read[id]}
		a.Fold(a.Start)
		if d.s.reg != nil {
			a.QuotaBytes = d.s.reg.quota(instances[id].Group)
		}
		out = append(out, a)
	}
	return out
}

// auditEnd is the round's audit as it ends: the readings since the last checkpoint, one every
// auditReadGap until scanner.kvcm_persist_gap has passed since the walk read its last page
// (since now when another driver read it: a page read before this driver took the walk was
// read before now), and the last of them, End. The wait holds the walk's round end, not its
// lease (renewed apart); a stop cuts it short and marks the audit Early.
func (d *walkDriver) auditEnd(ctx context.Context, round []pipeline.AuditCount, now time.Time) []pipeline.AuditCount {
	out := foldReadings(round, d.audit.takeReadings())
	r := d.metadataReader()
	if len(out) == 0 {
		return out
	}
	walkEnd := now
	d.audit.mu.Lock()
	if w := d.audit.walkEnd; !w.IsZero() && w.Before(now) {
		walkEnd = w
	}
	d.audit.mu.Unlock()
	ids := auditIDs(out)
	early := false
	left := walkEnd.Add(d.s.cfg.KVCMPersistGap).Sub(d.s.now())
	if r == nil {
		left = 0 // no reading to wait for
	}
	for left > 0 {
		step := min(left, auditReadGap)
		if !sleepCtx(ctx, step) {
			early = true
			break
		}
		left -= step
		if left > 0 {
			out = foldReadings(out, []auditReading{readAll(ctx, r, ids, d.s.now())})
		}
	}
	last := readAll(ctx, r, ids, d.s.now())
	for try := 0; try < auditRetries && r != nil && !early && incomplete(last); try++ {
		if !sleepCtx(ctx, auditRetryGap) {
			break
		}
		again := readAll(ctx, r, ids, d.s.now())
		for id, p := range last {
			if p.Keys == nil {
				last[id] = again[id]
			}
		}
	}
	out = slices.Clone(out)
	for i := range out {
		out[i].End = last[out[i].Instance]
		out[i].Fold(out[i].End)
		out[i].Early = early
	}
	return out
}

// incomplete: a reading found no key count (a read between KVCM's DEL and HSET, or a
// failure; a KVCM that keeps no usage still persists its key count).
func incomplete(r auditReading) bool {
	for _, p := range r {
		if p.Keys == nil {
			return true
		}
	}
	return false
}

// sleepCtx waits d, false when ctx ends first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (d *walkDriver) metadataReader() meta.MetadataReader {
	st, err := d.s.stores.Store(d.h.store)
	if err != nil {
		return nil
	}
	r, _ := st.(meta.MetadataReader)
	return r
}

// readAll reads the persisted counters of instances at now, in one round trip when r can.
func readAll(ctx context.Context, r meta.MetadataReader, ids []string, now time.Time) auditReading {
	out := make(auditReading, len(ids))
	if br, ok := r.(meta.MetadataBatchReader); ok && len(ids) > 0 {
		fields, errs := br.ReadMetadataMany(ctx, ids)
		for i, id := range ids {
			out[id] = parseCounters(fields[i], errs[i], now)
		}
		return out
	}
	for _, id := range ids {
		out[id] = readCounters(ctx, r, id, now)
	}
	return out
}

// readCounters reads an instance's persisted counters.
func readCounters(
	ctx context.Context,
	r meta.MetadataReader,
	instance string,
	now time.Time,
) *pipeline.PersistedCounters {
	if r == nil {
		return &pipeline.PersistedCounters{AtUs: now.UnixMicro(), Err: "the metadata store cannot read the metadata hash"}
	}
	fields, err := r.ReadMetadata(ctx, instance)
	return parseCounters(fields, err, now)
}

// parseCounters is a metadata hash as KVCM restores it. An absent hash is no reading, not
// zeros: KVCM persists with DEL then HSET (no MULTI), and a read between the two finds none.
func parseCounters(fields map[string]string, err error, now time.Time) *pipeline.PersistedCounters {
	p := &pipeline.PersistedCounters{AtUs: now.UnixMicro()}
	switch {
	case err != nil:
		p.Err = err.Error()
		return p
	case len(fields) == 0:
		p.Err = "no metadata hash (none persisted yet, or read between KVCM's DEL and HSET)"
		return p
	}
	var errs []string
	if raw, ok := fields[kvcm.FieldKeyCount]; ok {
		if v, err := kvcm.ParseKeyCount(raw); err != nil {
			errs = append(errs, err.Error())
		} else {
			p.Keys = &v
		}
	} else {
		errs = append(errs, kvcm.FieldKeyCount+" absent")
	}
	if raw, ok := fields[kvcm.FieldStorageUsage]; ok {
		u, err := kvcm.DecodeStorageUsage([]byte(raw))
		if err != nil {
			errs = append(errs, err.Error())
		} else {
			p.Usage = map[string]uint64{}
			for _, m := range u.Members {
				if m.Known && m.Slot != kvcm.TypeVCNSHF3FS { // counted in hf3fs (ToBaseType)
					p.Usage[m.Slot.String()] = m.Value
				}
			}
		}
	} else {
		errs = append(errs, kvcm.FieldStorageUsage+" absent (a KVCM that keeps no usage)")
	}
	p.Err = strings.Join(errs, "; ")
	return p
}

// auditMetrics are the audit's gauges, by store and instance, as the store's last round left
// them; the drift ones by bound (low, high: the range of pipeline/audit.go), exported only
// where both readings have the counter.
type auditMetrics struct {
	KeyDrift       *prometheus.GaugeVec
	UsageDrift     *prometheus.GaugeVec
	RecountKeys    *prometheus.GaugeVec
	RecountBytes   *prometheus.GaugeVec
	PersistedKeys  *prometheus.GaugeVec
	PersistedBytes *prometheus.GaugeVec
	Quota          *prometheus.GaugeVec
	Inexact        *prometheus.GaugeVec
	End            *prometheus.GaugeVec
}

func newAuditMetrics(f promauto.Factory) auditMetrics {
	si := []string{"store", "kvcm_instance"}
	sit := []string{"store", "kvcm_instance", "storage_type"}
	return auditMetrics{
		KeyDrift: f.NewGaugeVec(prometheus.GaugeOpts{Name: "kvcm_gc_kvcm_key_count_drift",
			Help: "KVCM's persisted key count minus the scanner's recount of the instance's " +
				"keys, at the store's last round, as a range (bound low, high)."},
			append(si, "bound")),
		UsageDrift: f.NewGaugeVec(prometheus.GaugeOpts{Name: "kvcm_gc_kvcm_usage_drift_bytes",
			Help: "KVCM's persisted usage minus the scanner's recount, by storage type, at the " +
				"store's last round, as a range (bound low, high); positive: phantom bytes KVCM counts."},
			append(sit, "bound")),
		RecountKeys: f.NewGaugeVec(prometheus.GaugeOpts{Name: "kvcm_gc_kvcm_recount_keys",
			Help: "Block keys of the instance KVCM counts, recounted by the store's last round."}, si),
		RecountBytes: f.NewGaugeVec(prometheus.GaugeOpts{Name: "kvcm_gc_kvcm_recount_bytes",
			Help: "Bytes of the instance's locations by storage type as KVCM counts them, " +
				"recounted by the store's last round."}, sit),
		PersistedKeys: f.NewGaugeVec(prometheus.GaugeOpts{Name: "kvcm_gc_kvcm_persisted_keys",
			Help: "KVCM's persisted key count of the instance, read at the end of the store's last round."}, si),
		PersistedBytes: f.NewGaugeVec(prometheus.GaugeOpts{Name: "kvcm_gc_kvcm_persisted_bytes",
			Help: "KVCM's persisted usage of the instance by storage type, read at the end of the store's last round."}, sit),
		Quota: f.NewGaugeVec(prometheus.GaugeOpts{Name: "kvcm_gc_kvcm_quota_bytes",
			Help: "quota.capacity of the instance's group in KVCM's registry (shared by the group's instances; 0: none)."}, si),
		Inexact: f.NewGaugeVec(prometheus.GaugeOpts{Name: "kvcm_gc_kvcm_recount_inexact",
			Help: "Specs and locations of the instance whose bytes in KVCM's count cannot be " +
				"known (the drift range does not bound them)."}, si),
		End: f.NewGaugeVec(prometheus.GaugeOpts{Name: "kvcm_gc_kvcm_audit_timestamp_seconds",
			Help: "Unix time the store's last audited round ended."}, si),
	}
}

func (m auditMetrics) vecs() []*prometheus.GaugeVec {
	return []*prometheus.GaugeVec{
		m.KeyDrift,
		m.UsageDrift,
		m.RecountKeys,
		m.RecountBytes,
		m.PersistedKeys,
		m.PersistedBytes,
		m.Quota,
		m.Inexact,
		m.End,
	}
}

// set replaces the store's series with its last audit.
func (m auditMetrics) set(store string, audit []pipeline.AuditCount, endUs int64) {
	for _, v := range m.vecs() {
		v.DeletePartialMatch(prometheus.Labels{"store": store})
	}
	for i := range audit {
		a := &audit[i]
		id := strings.ToValidUTF8(a.Instance, "\uFFFD") // a label value must be UTF-8
		m.RecountKeys.WithLabelValues(store, id).Set(float64(a.Keys))
		m.Quota.WithLabelValues(store, id).Set(float64(a.QuotaBytes))
		m.Inexact.WithLabelValues(store, id).Set(float64(a.Inexact))
		m.End.WithLabelValues(store, id).Set(float64(endUs) / 1e6)
		if a.End != nil && a.End.Keys != nil {
			m.PersistedKeys.WithLabelValues(store, id).Set(float64(*a.End.Keys))
		}
		if d := a.KeyDrift(); d.Ok {
			m.KeyDrift.WithLabelValues(store, id, "low").Set(float64(d.Low))
			m.KeyDrift.WithLabelValues(store, id, "high").Set(float64(d.High))
		}
		for _, slot := range a.Slots() {
			m.RecountBytes.WithLabelValues(store, id, slot).Set(float64(a.Usage[slot]))
			if a.End != nil && a.End.Usage != nil {
				m.PersistedBytes.WithLabelValues(store, id, slot).Set(float64(a.End.Usage[slot]))
			}
			if d := a.UsageDrift(slot); d.Ok {
				m.UsageDrift.WithLabelValues(store, id, slot, "low").Set(float64(d.Low))
				m.UsageDrift.WithLabelValues(store, id, slot, "high").Set(float64(d.High))
			}
		}
	}
}
