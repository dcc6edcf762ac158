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

// The audit of KVCM's counters (DESIGN §13.4; pipeline/audit.go says what the range means).
// Every page the walk records adds its blocks to a recount per instance (kvcm.Recount: keys,
// and bytes by slot as KVCM's own URI parsing reads them, every location in any status); the
// round's running recount travels in the store's checkpoint, so a walk resumed elsewhere goes
// on counting. When the round starts, the audit reads every instance's persisted counters
// (one HGETALL of its metadata hash); when it ends, it reads them again, and the round's
// recount with both readings becomes the store's last audit, exported as
// kvcm_gc_kvcm_*_drift gauges. The audit only reads.

// maxAudit bounds the instances of a store the audit follows (the checkpoint carries each).
const maxAudit = 256

// auditTally is a driver's recounts of pages scanned whose checkpoint is not written yet.
type auditTally struct {
	mu      sync.Mutex
	pending []auditPage
}

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

// reset forgets every page (a round starts or ends).
func (t *auditTally) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pending = nil
}

// apply adds the page checkpoint c records (its cursor is the page's next, or the walk is
// done) to the round's running recount.
func (t *auditTally) apply(c pipeline.Checkpoint) pipeline.Checkpoint {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !c.InRound {
		return c
	}
	for i, p := range t.pending {
		if p.next == c.Cursor && (p.next != 0 || c.Walked) {
			c.AuditRound = mergeAudit(c.AuditRound, p.counts)
			t.pending = slices.Delete(t.pending, i, i+1)
			break
		}
	}
	return c
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
// maxAudit, by id), its group's quota, and its persisted counters read now.
func (d *walkDriver) auditStart(
	ctx context.Context,
	instances map[string]meta.Instance,
	now time.Time,
) []pipeline.AuditCount {
	ids := slices.Sorted(maps.Keys(instances))
	if len(ids) > maxAudit {
		ids = ids[:maxAudit]
	}
	r := d.metadataReader()
	out := make([]pipeline.AuditCount, 0, len(ids))
	for _, id := range ids {
		a := pipeline.AuditCount{Instance: id, Start: readCounters(ctx, r, id, now)}
		if d.s.reg != nil {
			a.QuotaBytes = d.s.reg.quota(instances[id].Group)
		}
		out = append(out, a)
	}
	return out
}

// auditEnd is the round's audit as it ends: each instance's persisted counters read again.
func (d *walkDriver) auditEnd(ctx context.Context, round []pipeline.AuditCount, now time.Time) []pipeline.AuditCount {
	r := d.metadataReader()
	out := slices.Clone(round)
	for i := range out {
		out[i].End = readCounters(ctx, r, out[i].Instance, now)
	}
	return out
}

func (d *walkDriver) metadataReader() meta.MetadataReader {
	st, err := d.s.stores.Store(d.h.store)
	if err != nil {
		return nil
	}
	r, _ := st.(meta.MetadataReader)
	return r
}

// readCounters reads an instance's persisted counters. An absent hash is no reading, not
// zeros: KVCM persists with DEL then HSET (no MULTI), and a read between the two finds none.
func readCounters(
	ctx context.Context,
	r meta.MetadataReader,
	instance string,
	now time.Time,
) *pipeline.PersistedCounters {
	p := &pipeline.PersistedCounters{AtUs: now.UnixMicro()}
	if r == nil {
		p.Err = "the metadata store cannot read the metadata hash"
		return p
	}
	fields, err := r.ReadMetadata(ctx, instance)
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
