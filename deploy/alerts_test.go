package deploy_test

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/kvcm-gc/kvcm-gc/internal/markdown"
)

// The alerting rules, shipped in the chart, and their promtool unit tests (generated from
// alertCases by `go generate ./deploy`).
var (
	alertsFile     = filepath.Join(chartDir, "files", "alerts.yaml")
	alertTestsFile = filepath.Join("prometheus", "alerts_test.yaml")
)

// runbook is docs/runbook.md, and the address every runbook_url starts with.
const (
	runbookFile = "../docs/runbook.md"
	runbookURL  = "https://github.com/kvcm-gc/kvcm-gc/blob/main/docs/runbook.md"
)

// alertRule is one alerting rule of alerts.yaml.
type alertRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func loadAlerts(t *testing.T) []alertRule {
	t.Helper()
	data, err := os.ReadFile(alertsFile)
	require.NoError(t, err)
	var f struct {
		Groups []struct {
			Name  string      `yaml:"name"`
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(data, &f))
	var out []alertRule
	for _, g := range f.Groups {
		require.NotEmpty(t, g.Name)
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Alert, "%s: recording rules are not expected", alertsFile)
			out = append(out, r)
		}
	}
	require.NotEmpty(t, out)
	return out
}

// anchors are the GitHub anchors of a Markdown file's headings.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return markdown.Anchors(string(data))
}

// TestAlertRules checks every alerting rule: its expression uses exported metrics and labels
// only, it has a severity, a summary, a description and a runbook_url pointing at its own
// heading of docs/runbook.md, and promtool accepts the file.
func TestAlertRules(t *testing.T) {
	known := exported(t)
	headings := anchors(t, runbookFile)
	var names []string
	for _, r := range loadAlerts(t) {
		names = append(names, r.Alert)
		require.Contains(t, []string{"critical", "warning", "info"}, r.Labels["severity"], r.Alert)
		require.NotEmpty(t, r.Annotations["summary"], r.Alert)
		require.NotEmpty(t, r.Annotations["description"], r.Alert)
		checkExpr(t, r.Alert, r.Expr, known)
		url := r.Annotations["runbook_url"]
		base, anchor, ok := strings.Cut(url, "#")
		require.True(t, ok, "%s: runbook_url %q has no heading", r.Alert, url)
		require.Equal(t, runbookURL, base, r.Alert)
		require.Equal(t, strings.ToLower(r.Alert), anchor, "%s: runbook_url names another heading", r.Alert)
		require.True(t, headings[anchor], "%s: docs/runbook.md has no heading #%s", r.Alert, anchor)
	}
	require.Len(t, slices.Compact(slices.Sorted(slices.Values(names))), len(names), "an alert name repeats")
	// The alerts the operations contract asks for.
	for _, want := range []string{"KvcmGcNoRoundCompleted", "KvcmGcStoreNoLease", "KvcmGcStoreWalkErrors",
		"KvcmGcStoreWalkStuck", "KvcmGcStoreWalkHeldBack", "KvcmGcScannersHoldNoLease", "KvcmGcDeleterStuckAtCap",
		"KvcmGcDeadLetters", "KvcmGcOperationErrors",
		// Stuck DELETING (collect_deleting): a group never collected, first sights not recorded,
		// data left in place; and keys of both layouts, which nothing judges.
		"KvcmGcStuckDeletingLeaseTooLong", "KvcmGcStuckDeletingUnobserved", "KvcmGcStuckDeletingDataLeft",
		"KvcmGcAmbiguousLayoutKeys"} {
		require.Contains(t, names, want)
	}
	run(t, tool(t, "promtool"), "check", "rules", alertsFile)
}

// series is one input series of a promtool test.
type series struct{ series, values string }

// alertCheck is what one alert must be at one time: firing once per label set of want (the
// labels besides alertname and the rule's own; none: not firing).
type alertCheck struct {
	at, alert string
	want      []map[string]string
}

// alertCase is one promtool test group.
type alertCase struct {
	name     string
	interval string
	input    []series
	checks   []alertCheck
}

// ns is the namespace label of the test series, as a Kubernetes scrape adds it.
const ns = `namespace="kvcm"`

func lbl(kv ...string) map[string]string {
	m := map[string]string{"namespace": "kvcm"}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// alertCases test every alert, most of them next to series that must not fire it. The
// per-store alerts each run with one store in trouble among healthy ones.
var alertCases = []alertCase{
	{name: "one store without a new round among stores whose rounds advance", interval: "1m", input: []series{
		// meta-a: a round every 13h. meta-b: stuck in round 7. meta-c: its lease moved from
		// scanner-0 to scanner-1 at 20h, its rounds advancing across the move.
		{`kvcm_gc_store_round{` + ns + `, pod="scanner-0", store="meta-a"}`, "1x779 2x779 3x779 4x779"},
		{`kvcm_gc_store_round{` + ns + `, pod="scanner-1", store="meta-b"}`, "7x3119"},
		{`kvcm_gc_store_round{` + ns + `, pod="scanner-0", store="meta-c"}`, "1x779 2x419 stale"},
		{`kvcm_gc_store_round{` + ns + `, pod="scanner-1", store="meta-c"}`, "_x1200 2x359 3x779 4x779"},
	}, checks: []alertCheck{
		{at: "20h", alert: "KvcmGcNoRoundCompleted"},
		{at: "26h10m", alert: "KvcmGcNoRoundCompleted"},
		{at: "27h", alert: "KvcmGcNoRoundCompleted", want: []map[string]string{lbl("store", "meta-b")}},
		{at: "40h", alert: "KvcmGcNoRoundCompleted", want: []map[string]string{lbl("store", "meta-b")}},
	}},
	{name: "one store without a lease among leased stores", interval: "1m", input: []series{
		// Both scanners read the registry's stores meta-a, meta-b, meta-c, and meta-d until 6h,
		// when meta-d left it (and its holder released it). meta-a: held throughout. meta-b: its
		// scanner lost it at 10h and nobody took it until scanner-0 did at 40h. meta-c: moved from scanner-0 to
		// scanner-1 with a two-minute gap at 5h.
		{`kvcm_gc_store_registered{` + ns + `, pod="scanner-0", store="meta-a"}`, "1x2500"},
		{`kvcm_gc_store_registered{` + ns + `, pod="scanner-1", store="meta-a"}`, "1x2500"},
		{`kvcm_gc_store_registered{` + ns + `, pod="scanner-0", store="meta-b"}`, "1x2500"},
		{`kvcm_gc_store_registered{` + ns + `, pod="scanner-1", store="meta-b"}`, "1x2500"},
		{`kvcm_gc_store_registered{` + ns + `, pod="scanner-0", store="meta-c"}`, "1x2500"},
		{`kvcm_gc_store_registered{` + ns + `, pod="scanner-1", store="meta-c"}`, "1x2500"},
		{`kvcm_gc_store_registered{` + ns + `, pod="scanner-0", store="meta-d"}`, "1x359 stale"},
		{`kvcm_gc_store_registered{` + ns + `, pod="scanner-1", store="meta-d"}`, "1x359 stale"},
		{`kvcm_gc_store_lease_held{` + ns + `, pod="scanner-0", store="meta-a"}`, "1x2500"},
		{`kvcm_gc_store_lease_held{` + ns + `, pod="scanner-1", store="meta-b"}`, "1x599 stale"},
		{`kvcm_gc_store_lease_held{` + ns + `, pod="scanner-0", store="meta-b"}`, "_x2400 1x100"},
		{`kvcm_gc_store_lease_held{` + ns + `, pod="scanner-0", store="meta-c"}`, "1x299 stale"},
		{`kvcm_gc_store_lease_held{` + ns + `, pod="scanner-1", store="meta-c"}`, "_x301 1x2198"},
		{`kvcm_gc_store_lease_held{` + ns + `, pod="scanner-0", store="meta-d"}`, "1x359 stale"},
	}, checks: []alertCheck{
		{at: "5h20m", alert: "KvcmGcStoreNoLease"},
		{at: "6h30m", alert: "KvcmGcStoreNoLease"}, // meta-d left the registry
		{at: "10h10m", alert: "KvcmGcStoreNoLease"},
		{at: "10h30m", alert: "KvcmGcStoreNoLease", want: []map[string]string{lbl("store", "meta-b")}},
		{at: "14h", alert: "KvcmGcStoreNoLease", want: []map[string]string{lbl("store", "meta-b")}},
		{at: "39h", alert: "KvcmGcStoreNoLease", want: []map[string]string{lbl("store", "meta-b")}},
		{at: "40h30m", alert: "KvcmGcStoreNoLease"}, // taken again at 40h
	}},
	{name: "one store whose walk keeps failing among healthy and briefly failing ones", interval: "1m", input: []series{
		{`kvcm_gc_store_walk_state{` + ns + `, pod="scanner-0", store="meta-a", state="error"}`, "0x60"},
		{`kvcm_gc_store_walk_state{` + ns + `, pod="scanner-0", store="meta-b", state="error"}`, "1x60"},
		{`kvcm_gc_store_walk_state{` + ns + `, pod="scanner-1", store="meta-c", state="error"}`, "1x4 0x55"},
	}, checks: []alertCheck{
		{at: "10m", alert: "KvcmGcStoreWalkErrors"},
		{at: "50m", alert: "KvcmGcStoreWalkErrors", want: []map[string]string{lbl("store", "meta-b")}},
	}},
	{name: "one store scanning without reading keys among moving and resting ones", interval: "1m", input: []series{
		{`kvcm_gc_store_walk_state{` + ns + `, pod="scanner-0", store="meta-a", state="scanning"}`, "1x90"},
		{`kvcm_gc_store_scanned_keys_total{` + ns + `, pod="scanner-0", store="meta-a"}`, "0+100x90"},
		{`kvcm_gc_store_walk_state{` + ns + `, pod="scanner-0", store="meta-b", state="scanning"}`, "1x90"},
		// meta-b stops reading keys at 20m.
		{`kvcm_gc_store_scanned_keys_total{` + ns + `, pod="scanner-0", store="meta-b"}`, "0+100x20 2000x70"},
		{`kvcm_gc_store_walk_state{` + ns + `, pod="scanner-1", store="meta-c", state="scanning"}`, "0x90"},
		{`kvcm_gc_store_scanned_keys_total{` + ns + `, pod="scanner-1", store="meta-c"}`, "7000x90"},
	}, checks: []alertCheck{
		{at: "55m", alert: "KvcmGcStoreWalkStuck"},
		{at: "70m", alert: "KvcmGcStoreWalkStuck", want: []map[string]string{lbl("store", "meta-b")}},
	}},
	{name: "one store held back for hours among briefly held ones", interval: "1m", input: []series{
		// From 30m on, meta-b waits for the registry; meta-a waits for the backlog for 40m.
		{`kvcm_gc_store_walk_state{` + ns + `, pod="scanner-0", store="meta-a", state="backpressure"}`, "0x59 1x39 0x110"},
		{`kvcm_gc_store_walk_state{` + ns + `, pod="scanner-0", store="meta-b", state="registry_backoff"}`, "0x29 1x180"},
		{`kvcm_gc_store_walk_state{` + ns + `, pod="scanner-1", store="meta-c", state="backpressure"}`, "0x210"},
	}, checks: []alertCheck{
		{at: "2h", alert: "KvcmGcStoreWalkHeldBack"},
		{at: "3h", alert: "KvcmGcStoreWalkHeldBack", want: []map[string]string{lbl("store", "meta-b", "state", "registry_backoff")}},
	}},
	{name: "keys of a removed instance left for more than a day, beside a removal in progress", interval: "1m", input: []series{
		// meta-a: locations of "gone" counted from 1h on, first seen then (3600 s).
		// meta-b: a removal's keys, first counted at 30h (108000 s), trimmed by 32h.
		{`kvcm_gc_unregistered_instance_locations{` + ns + `, pod="scanner-0", store="meta-a", kvcm_instance="gone"}`, "_x60 25x2400"},
		{`kvcm_gc_unregistered_instance_first_seen_timestamp_seconds{` + ns + `, pod="scanner-0", store="meta-a", kvcm_instance="gone"}`, "_x60 3600x2400"},
		{`kvcm_gc_unregistered_instance_locations{` + ns + `, pod="scanner-1", store="meta-b", kvcm_instance="going"}`, "_x1800 9x120 stale"},
		{`kvcm_gc_unregistered_instance_first_seen_timestamp_seconds{` + ns + `, pod="scanner-1", store="meta-b", kvcm_instance="going"}`, "_x1800 108000x120 stale"},
	}, checks: []alertCheck{
		{at: "20h", alert: "KvcmGcUnregisteredInstanceKeys"},
		{at: "25h30m", alert: "KvcmGcUnregisteredInstanceKeys"}, // a day old at 25h, pending for an hour
		{at: "27h", alert: "KvcmGcUnregisteredInstanceKeys", want: []map[string]string{lbl("store", "meta-a", "kvcm_instance", "gone")}},
		{at: "31h", alert: "KvcmGcUnregisteredInstanceKeys", want: []map[string]string{lbl("store", "meta-a", "kvcm_instance", "gone")}},
	}},
	{name: "scanners that hold no lease", interval: "1m", input: []series{
		{`kvcm_gc_scanner_lease_held{` + ns + `, pod="scanner-0"}`, "0x30"},
		{`kvcm_gc_scanner_lease_held{` + ns + `, pod="scanner-1"}`, "0x30"},
		{`kvcm_gc_scanner_lease_held{namespace="kvcm-b", pod="scanner-0"}`, "2x30"},
	}, checks: []alertCheck{
		{at: "5m", alert: "KvcmGcScannersHoldNoLease"},
		{at: "20m", alert: "KvcmGcScannersHoldNoLease", want: []map[string]string{lbl()}},
	}},
	{name: "one deployment whose scanners are not scraped beside one whose are", interval: "1m", input: []series{
		// kvcm: its scanner scraped until 10m, its prober throughout. kvcm-b: both throughout.
		{`kvcm_gc_build_info{` + ns + `, pod="scanner-0", version="v0.1.0"}`, "1x9 stale"},
		{`kvcm_gc_jetstream_stats_up{` + ns + `, pod="scanner-0", stage="scanner"}`, "1x9 stale"},
		{`kvcm_gc_build_info{` + ns + `, pod="prober-0", version="v0.1.0"}`, "1x60"},
		{`kvcm_gc_jetstream_stats_up{` + ns + `, pod="prober-0", stage="prober"}`, "1x60"},
		{`kvcm_gc_build_info{namespace="kvcm-b", pod="scanner-0", version="v0.1.0"}`, "1x60"},
		{`kvcm_gc_jetstream_stats_up{namespace="kvcm-b", pod="scanner-0", stage="scanner"}`, "1x60"},
		{`kvcm_gc_build_info{namespace="kvcm-b", pod="prober-0", version="v0.1.0"}`, "1x60"},
	}, checks: []alertCheck{
		{at: "9m", alert: "KvcmGcScannerMetricsAbsent"},
		{at: "20m", alert: "KvcmGcScannerMetricsAbsent"}, // pending for 15m
		{at: "40m", alert: "KvcmGcScannerMetricsAbsent", want: []map[string]string{lbl()}},
	}},
	{name: "deleters at their cap finishing nothing", interval: "1m", input: []series{
		// At the cap throughout; nothing acknowledged after 10m.
		{`kvcm_gc_consumer_ack_pending_messages{` + ns + `, pod="deleter-0", stage="deleter"}`, "2x50"},
		{`kvcm_gc_consumer_max_ack_pending_messages{` + ns + `, pod="deleter-0", stage="deleter"}`, "2x50"},
		{`kvcm_gc_messages_total{` + ns + `, pod="deleter-0", stage="deleter", result="ack"}`, "0+5x10 50x40"},
		// Another deployment at its cap, acknowledging.
		{`kvcm_gc_consumer_ack_pending_messages{namespace="kvcm-b", pod="deleter-0", stage="deleter"}`, "2x50"},
		{`kvcm_gc_consumer_max_ack_pending_messages{namespace="kvcm-b", pod="deleter-0", stage="deleter"}`, "2x50"},
		{`kvcm_gc_messages_total{namespace="kvcm-b", pod="deleter-0", stage="deleter", result="ack"}`, "0+5x50"},
	}, checks: []alertCheck{
		{at: "30m", alert: "KvcmGcDeleterStuckAtCap"},
		{at: "45m", alert: "KvcmGcDeleterStuckAtCap", want: []map[string]string{lbl()}},
	}},
	{name: "a terminated message", interval: "1m", input: []series{
		{`kvcm_gc_messages_total{` + ns + `, pod="prober-0", stage="prober", result="term"}`, "0x4 1x30"},
		{`kvcm_gc_messages_total{` + ns + `, pod="deleter-0", stage="deleter", result="term"}`, "0x35"},
	}, checks: []alertCheck{
		{at: "3m", alert: "KvcmGcDeadLetters"},
		{at: "10m", alert: "KvcmGcDeadLetters", want: []map[string]string{lbl("stage", "prober")}},
	}},
	{name: "a message the server gave up on", interval: "1m", input: []series{
		{`kvcm_gc_messages_total{` + ns + `, pod="deleter-0", stage="deleter", result="max_deliveries"}`, "0x4 1x30"},
		{`kvcm_gc_messages_total{` + ns + `, pod="deleter-1", stage="deleter", result="max_deliveries"}`, "0x35"},
		{`kvcm_gc_messages_total{` + ns + `, pod="prober-0", stage="prober", result="max_deliveries"}`, "0x35"},
	}, checks: []alertCheck{
		{at: "3m", alert: "KvcmGcDeliveriesUnanswered"},
		{at: "10m", alert: "KvcmGcDeliveriesUnanswered", want: []map[string]string{lbl("stage", "deleter")}},
	}},
	{name: "failing operations", interval: "1m", input: []series{
		{`kvcm_gc_operation_errors_total{` + ns + `, pod="scanner-0", stage="scanner", op="store"}`, "0+6x40"},
		{`kvcm_gc_operation_errors_total{` + ns + `, pod="scanner-0", stage="scanner", op="lease"}`, "0+1x40"},
	}, checks: []alertCheck{
		{at: "30m", alert: "KvcmGcOperationErrors", want: []map[string]string{lbl("stage", "scanner", "op", "store")}},
	}},
	{name: "consumer stats unreadable", interval: "1m", input: []series{
		{`kvcm_gc_jetstream_stats_up{` + ns + `, pod="deleter-0", stage="deleter"}`, "0x30"},
		{`kvcm_gc_jetstream_stats_up{` + ns + `, pod="deleter-1", stage="deleter"}`, "0x30"},
		{`kvcm_gc_jetstream_stats_up{` + ns + `, pod="prober-0", stage="prober"}`, "1x30"},
	}, checks: []alertCheck{
		{at: "20m", alert: "KvcmGcJetStreamStatsUnavailable", want: []map[string]string{lbl("stage", "deleter")}},
	}},
	{name: "a stream at its max_bytes, and one that lost messages", interval: "1m", input: []series{
		// Both processes that export the stream figures report each stream.
		{`kvcm_gc_stream_discarding{` + ns + `, pod="prober-0", stream="KVCMGC_kvcmgc_c1_BATCHES"}`, "0x5 1x30"},
		{`kvcm_gc_stream_discarding{` + ns + `, pod="deleter-0", stream="KVCMGC_kvcmgc_c1_BATCHES"}`, "0x5 1x30"},
		{`kvcm_gc_stream_lost_messages{` + ns + `, pod="prober-0", stream="KVCMGC_kvcmgc_c1_BATCHES"}`, "0x35"},
		{`kvcm_gc_stream_discarding{` + ns + `, pod="prober-0", stream="KVCMGC_kvcmgc_c1_DELETES"}`, "0x35"},
		{`kvcm_gc_stream_lost_messages{` + ns + `, pod="deleter-0", stream="KVCMGC_kvcmgc_c1_DELETES"}`, "0x10 3x25"},
		{`kvcm_gc_stream_discarding{` + ns + `, pod="prober-0", stream="KVCMGC_kvcmgc_c1_EVENTS"}`, "0x35"},
		{`kvcm_gc_stream_lost_messages{` + ns + `, pod="prober-0", stream="KVCMGC_kvcmgc_c1_EVENTS"}`, "0x35"},
	}, checks: []alertCheck{
		{at: "8m", alert: "KvcmGcStreamDiscarding"},
		{at: "30m", alert: "KvcmGcStreamDiscarding", want: []map[string]string{
			lbl("stream", "KVCMGC_kvcmgc_c1_BATCHES"), lbl("stream", "KVCMGC_kvcmgc_c1_DELETES")}},
	}},
	{name: "a forgotten pause", interval: "5m", input: []series{
		{`kvcm_gc_stage_paused{` + ns + `, pod="deleter-0", stage="deleter"}`, "1x160"},
		{`kvcm_gc_stage_paused{` + ns + `, pod="prober-0", stage="prober"}`, "1x12 0x148"},
	}, checks: []alertCheck{
		{at: "11h", alert: "KvcmGcStagePausedLong"},
		{at: "12h30m", alert: "KvcmGcStagePausedLong", want: []map[string]string{lbl("stage", "deleter")}},
	}},
	{name: "stuck DELETING kept", interval: "1m", input: []series{
		{`kvcm_gc_prober_skips_total{` + ns + `, pod="prober-0", reason="deleting_lease_too_long"}`, "0 1x100"},
		{`kvcm_gc_prober_skips_total{` + ns + `, pod="prober-0", reason="deleting_unobserved"}`, "0+1x100"},
		{`kvcm_gc_prober_skips_total{` + ns + `, pod="prober-0", reason="ambiguous_layout"}`, "0 3x100"},
		{`kvcm_gc_stuck_deleting_data_left_total{` + ns + `, pod="deleter-0", storage_type="file", reason="shared"}`, "0 1x100"},
		{`kvcm_gc_stuck_deleting_data_left_total{` + ns + `, pod="deleter-0", storage_type="hf3fs", reason="shared"}`, "0x100"},
	}, checks: []alertCheck{
		{at: "30m", alert: "KvcmGcStuckDeletingLeaseTooLong"},
		{at: "70m", alert: "KvcmGcStuckDeletingLeaseTooLong", want: []map[string]string{lbl()}},
		{at: "20m", alert: "KvcmGcStuckDeletingUnobserved"},
		{at: "50m", alert: "KvcmGcStuckDeletingUnobserved", want: []map[string]string{lbl()}},
		{at: "5m", alert: "KvcmGcStuckDeletingDataLeft", want: []map[string]string{lbl("storage_type", "file", "reason", "shared")}},
		{at: "70m", alert: "KvcmGcAmbiguousLayoutKeys", want: []map[string]string{lbl()}},
	}},
	{name: "one swept storage whose walks stopped among storages walked daily", interval: "1m", input: []series{
		// nfs_a: walks end at 10m, then every 13h; its walk moved from walker-0 to walker-1 at
		// 20h, the new leader exporting the last end from the checkpoint. nfs_b: its last
		// walk ended at 10m.
		{`kvcm_gc_sweep_last_round_end_timestamp_seconds{` + ns + `, pod="walker-0", storage="nfs_a"}`, "0x9 600x779 47400x410 stale"},
		{`kvcm_gc_sweep_last_round_end_timestamp_seconds{` + ns + `, pod="walker-1", storage="nfs_a"}`, "_x1200 47400x370 94200x1000"},
		{`kvcm_gc_sweep_last_round_end_timestamp_seconds{` + ns + `, pod="walker-0", storage="nfs_b"}`, "0x9 600x1700"},
	}, checks: []alertCheck{
		{at: "26h", alert: "KvcmGcSweepNoWalkCompleted"},
		{at: "27h", alert: "KvcmGcSweepNoWalkCompleted", want: []map[string]string{lbl("storage", "nfs_b")}},
	}},
	{name: "a quarantine that does not empty beside one that does", interval: "1m", input: []series{
		// nfs_a: a file there since minute one. nfs_b: its quarantine empties every look.
		// nfs_c: conflict copies from 4m on.
		{`kvcm_gc_sweep_quarantine_oldest_timestamp_seconds{` + ns + `, pod="walker-0", storage="nfs_a"}`, "60x330"},
		{`kvcm_gc_sweep_quarantine_oldest_timestamp_seconds{` + ns + `, pod="walker-0", storage="nfs_b"}`, "0 0+60x330"},
		{`kvcm_gc_sweep_quarantine_conflicts{` + ns + `, pod="walker-0", storage="nfs_a"}`, "0x330"},
		{`kvcm_gc_sweep_quarantine_conflicts{` + ns + `, pod="walker-1", storage="nfs_c"}`, "0x4 2x326"},
	}, checks: []alertCheck{
		{at: "4h", alert: "KvcmGcSweepQuarantineStranded"},
		{at: "5h", alert: "KvcmGcSweepQuarantineStranded", want: []map[string]string{lbl("storage", "nfs_a")}},
		{at: "10m", alert: "KvcmGcSweepConflicts"},
		{at: "20m", alert: "KvcmGcSweepConflicts", want: []map[string]string{lbl("storage", "nfs_c")}},
	}},
	{name: "sweepers restoring and failing", interval: "1m", input: []series{
		{`kvcm_gc_sweep_restored_files_total{` + ns + `, pod="sweeper-0"}`, "0+1x60"},
		{`kvcm_gc_sweep_errors_total{` + ns + `, pod="sweeper-0", stage="sweeper", reason="quarantine"}`, "0+6x60"},
		{`kvcm_gc_sweep_errors_total{` + ns + `, pod="walker-0", stage="walker", reason="walk"}`, "0x60"},
	}, checks: []alertCheck{
		{at: "5m", alert: "KvcmGcSweepRestores"},
		{at: "30m", alert: "KvcmGcSweepRestores", want: []map[string]string{lbl()}},
		{at: "30m", alert: "KvcmGcSweepErrors", want: []map[string]string{lbl("stage", "sweeper", "reason", "quarantine")}},
	}},
}

var labelRefRE = regexp.MustCompile(`\{\{\s*\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

// promtoolTests renders alertCases as a promtool test file. The expected annotations are the
// rules' own, their {{ $labels.x }} filled in: annotations use no other template.
func promtoolTests(t *testing.T, rules []alertRule) []byte {
	t.Helper()
	byName := map[string]alertRule{}
	for _, r := range rules {
		byName[r.Alert] = r
	}
	type expAlert struct {
		Labels      map[string]string `yaml:"exp_labels"`
		Annotations map[string]string `yaml:"exp_annotations"`
	}
	type ruleTest struct {
		EvalTime  string     `yaml:"eval_time"`
		Alertname string     `yaml:"alertname"`
		ExpAlerts []expAlert `yaml:"exp_alerts"`
	}
	type inSeries struct {
		Series string `yaml:"series"`
		Values string `yaml:"values"`
	}
	type group struct {
		Name   string     `yaml:"name"`
		Int    string     `yaml:"interval"`
		Input  []inSeries `yaml:"input_series"`
		Alerts []ruleTest `yaml:"alert_rule_test"`
	}
	file := struct {
		RuleFiles []string `yaml:"rule_files"`
		EvalInt   string   `yaml:"evaluation_interval"`
		Tests     []group  `yaml:"tests"`
	}{RuleFiles: []string{filepath.Join("..", alertsFile)}, EvalInt: "5m"}
	for _, c := range alertCases {
		g := group{Name: c.name, Int: c.interval}
		for _, s := range c.input {
			g.Input = append(g.Input, inSeries{Series: s.series, Values: s.values})
		}
		for _, ch := range c.checks {
			r, ok := byName[ch.alert]
			require.True(t, ok, "case %q: no alert %s", c.name, ch.alert)
			rt := ruleTest{EvalTime: ch.at, Alertname: ch.alert, ExpAlerts: []expAlert{}}
			for _, want := range ch.want {
				labels := maps.Clone(want)
				if labels == nil {
					labels = map[string]string{}
				}
				maps.Copy(labels, r.Labels)
				ann := map[string]string{}
				for k, v := range r.Annotations {
					v = labelRefRE.ReplaceAllStringFunc(v, func(ref string) string {
						name := labelRefRE.FindStringSubmatch(ref)[1]
						val, ok := labels[name]
						require.True(t, ok, "%s: annotation %s names label %s, which the case does not give", ch.alert, k, name)
						return val
					})
					require.NotContains(t, v, "{{", "%s: annotation %s uses a template the test cannot fill", ch.alert, k)
					ann[k] = v
				}
				rt.ExpAlerts = append(rt.ExpAlerts, expAlert{Labels: labels, Annotations: ann})
			}
			g.Alerts = append(g.Alerts, rt)
		}
		file.Tests = append(file.Tests, g)
	}
	var b bytes.Buffer
	b.WriteString("# promtool unit tests of every alert (`promtool test rules deploy/prometheus/alerts_test.yaml`).\n" +
		"# Generated from alertCases in deploy/alerts_test.go by `go generate ./deploy`; do not edit.\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	require.NoError(t, enc.Encode(file))
	require.NoError(t, enc.Close())
	return b.Bytes()
}

// TestAlertUnitTests runs promtool's unit tests of the rules: every alert fires in at least one
// case and stays quiet for the series beside it. The test file is generated from alertCases
// and must be current.
func TestAlertUnitTests(t *testing.T) {
	rules := loadAlerts(t)
	want := promtoolTests(t, rules)
	if *update {
		require.NoError(t, os.WriteFile(alertTestsFile, want, 0o644))
	}
	have, err := os.ReadFile(alertTestsFile)
	require.NoError(t, err, "run go generate ./deploy")
	require.Equal(t, string(want), string(have), "%s drifted from alertCases: run go generate ./deploy", alertTestsFile)

	fired := map[string]bool{}
	for _, c := range alertCases {
		for _, ch := range c.checks {
			if len(ch.want) > 0 {
				fired[ch.alert] = true
			}
		}
	}
	for _, r := range rules {
		require.True(t, fired[r.Alert], "no promtool case fires %s", r.Alert)
	}
	out := run(t, tool(t, "promtool"), "test", "rules", alertTestsFile)
	t.Logf("promtool test rules: %s", strings.TrimSpace(fmt.Sprint(string(out))))
}
