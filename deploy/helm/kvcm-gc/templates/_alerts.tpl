{{/*
The alerting rules (docs/runbook.md has a heading for each), rendered from the values: their
windows follow the scanner's round_pause and the walker's sweep_round_pause, and each alert can
be turned off or given another for, threshold or severity (monitoring.prometheusRule.alerts).
files/alerts.yaml is what the default values render (`go generate ./deploy` writes it; a test
fails while it differs), for Prometheus servers without the operator.

Every alert keeps the namespace, so the kvcm-gc deployments of several KVCM clusters stay
apart; per-store and per-storage alerts keep the store or the storage, so one stuck is never
hidden by the healthy ones. Several replicas export the same JetStream numbers (read from the
server at each scrape), so consumer metrics are aggregated with max, never sum. A store's series
are exported by the scanner replica holding its lease, and move with it; a swept storage's by
the walker leading its walk.

In the rules below [[ and ]] stand for Prometheus' own template delimiters.
*/}}

{{/* The seconds of a duration .d named .what: a Go duration (90m, 1h30m, 1.5h) after an
     optional day count (1d, 2d12h), or a whole number of seconds. */}}
{{- define "kvcm-gc.seconds" -}}
{{- $d := toString .d -}}
{{- if regexMatch "^[0-9]+$" $d -}}
{{- $d -}}
{{- else -}}
{{- if or (eq $d "") (not (regexMatch "^([0-9]+d)?(([0-9]+(\\.[0-9]*)?|\\.[0-9]+)(h|m|s|ms|us|ns))*$" $d)) -}}
{{- fail (printf "%s: %q is not a duration (like 90m, 26h or 1d)" .what $d) -}}
{{- end -}}
{{- $days := 0 -}}
{{- if regexMatch "^[0-9]+d" $d -}}
{{- $days = regexFind "^[0-9]+" $d | int -}}
{{- $d = regexReplaceAll "^[0-9]+d" $d "" -}}
{{- end -}}
{{- $s := 0 -}}
{{- if $d -}}
{{- $base := toDate "2006-01-02" "2000-01-01" -}}
{{- $s = sub (mustDateModify $d $base | unixEpoch | int64) ($base | unixEpoch | int64) -}}
{{- end -}}
{{- add (mul $days 86400) $s -}}
{{- end -}}
{{- end -}}

{{/* A number of seconds as a Prometheus duration in its largest whole unit (26h, 90m). */}}
{{- define "kvcm-gc.promDuration" -}}
{{- $s := int64 . -}}
{{- if and (gt $s 0) (eq (mod $s 3600) 0) -}}{{ div $s 3600 }}h
{{- else if and (gt $s 0) (eq (mod $s 60) 0) -}}{{ div $s 60 }}m
{{- else -}}{{ $s }}s
{{- end -}}
{{- end -}}

{{/* A setting of the configuration of a stage (config, then stages.<stage>.config), else
     kvcm-gc's default. */}}
{{- define "kvcm-gc.stageSetting" -}}
{{- $c := mergeOverwrite (deepCopy (.root.Values.config | default dict)) (deepCopy ((index .root.Values.stages .stage | default dict).config | default dict)) -}}
{{- get $c .key | default .default -}}
{{- end -}}

{{/* The alert groups, as the PrometheusRule's spec and files/alerts.yaml hold them. */}}
{{- define "kvcm-gc.alertGroups" -}}
{{- $pr := .Values.monitoring.prometheusRule -}}
{{- $sec := dict -}}
{{- $_ := set $sec "roundPause" (include "kvcm-gc.seconds" (dict "d" (include "kvcm-gc.stageSetting" (dict "root" . "stage" "scanner" "key" "round_pause" "default" "24h")) "what" "round_pause") | int64) -}}
{{- $_ := set $sec "round" (include "kvcm-gc.seconds" (dict "d" $pr.roundDuration "what" "monitoring.prometheusRule.roundDuration") | int64) -}}
{{- $_ := set $sec "sweepPause" (include "kvcm-gc.seconds" (dict "d" (include "kvcm-gc.stageSetting" (dict "root" . "stage" "walker" "key" "sweep_round_pause" "default" "24h")) "what" "sweep_round_pause") | int64) -}}
{{- $_ := set $sec "walk" (include "kvcm-gc.seconds" (dict "d" $pr.walkDuration "what" "monitoring.prometheusRule.walkDuration") | int64) -}}
{{- $_ := set $sec "quarantine" (include "kvcm-gc.seconds" (dict "d" (include "kvcm-gc.stageSetting" (dict "root" . "stage" "sweeper" "key" "sweep_quarantine" "default" "1h")) "what" "sweep_quarantine") | int64) -}}
{{- $_ := set $sec "period" (add $sec.roundPause $sec.round) -}}
{{- $_ := set $sec "sweepPeriod" (add $sec.sweepPause $sec.walk) -}}
{{- /* The windows, as Prometheus durations, for the rules' text. */ -}}
{{- $w := dict -}}
{{- range $k, $v := $sec -}}{{- $_ := set $w $k (include "kvcm-gc.promDuration" $v) -}}{{- end -}}
{{- /* Each alert's defaults: for, severity, and its threshold (a number, or a duration when
       "duration" is set; none when absent). */ -}}
{{- $defaults := dict
    "KvcmGcNoRoundCompleted" (dict "for" "30m" "severity" "warning" "threshold" $sec.period "duration" true)
    "KvcmGcStoreNoLease" (dict "for" "15m" "severity" "warning")
    "KvcmGcStoreWalkErrors" (dict "for" "15m" "severity" "warning" "threshold" 0.5)
    "KvcmGcStoreRoundFailed" (dict "for" "5m" "severity" "warning")
    "KvcmGcStoreWalkStuck" (dict "for" "15m" "severity" "warning" "threshold" 1800 "duration" true)
    "KvcmGcStoreWalkHeldBack" (dict "for" "15m" "severity" "warning" "threshold" $sec.round "duration" true)
    "KvcmGcUnregisteredInstanceKeys" (dict "for" "1h" "severity" "info" "threshold" 86400 "duration" true)
    "KvcmGcKvcmCountersDrift" (dict "for" $sec.period "severity" "warning" "threshold" 0.05)
    "KvcmGcScannersHoldNoLease" (dict "for" "10m" "severity" "critical")
    "KvcmGcScannerMetricsAbsent" (dict "for" "15m" "severity" "warning")
    "KvcmGcDeleterStuckAtCap" (dict "for" "15m" "severity" "warning")
    "KvcmGcDeadLetters" (dict "for" "0s" "severity" "warning" "threshold" 0)
    "KvcmGcDeliveriesUnanswered" (dict "for" "0s" "severity" "warning" "threshold" 0)
    "KvcmGcOperationErrors" (dict "for" "15m" "severity" "warning" "threshold" 0.05)
    "KvcmGcJetStreamStatsUnavailable" (dict "for" "10m" "severity" "warning")
    "KvcmGcStreamDiscarding" (dict "for" "10m" "severity" "warning")
    "KvcmGcStagePausedLong" (dict "for" "12h" "severity" "info")
    "KvcmGcStuckDeletingLeaseTooLong" (dict "for" "1h" "severity" "warning" "threshold" 0)
    "KvcmGcStuckDeletingUnobserved" (dict "for" "30m" "severity" "warning" "threshold" 0)
    "KvcmGcStuckDeletingDataLeft" (dict "for" "0s" "severity" "info" "threshold" 0)
    "KvcmGcAmbiguousLayoutKeys" (dict "for" "1h" "severity" "info" "threshold" 0)
    "KvcmGcSweepNoWalkCompleted" (dict "for" "30m" "severity" "warning" "threshold" $sec.sweepPeriod "duration" true)
    "KvcmGcSweepQuarantineStranded" (dict "for" "30m" "severity" "warning" "threshold" (mul 4 $sec.quarantine) "duration" true)
    "KvcmGcSweepConflicts" (dict "for" "10m" "severity" "warning")
    "KvcmGcSweepRestores" (dict "for" "0s" "severity" "info" "threshold" 10)
    "KvcmGcSweepErrors" (dict "for" "15m" "severity" "warning" "threshold" 0.05)
-}}
{{- $groups := list
    (dict "name" "kvcm-gc-stores" "alerts" (list "KvcmGcNoRoundCompleted" "KvcmGcStoreNoLease" "KvcmGcStoreWalkErrors" "KvcmGcStoreRoundFailed" "KvcmGcStoreWalkStuck" "KvcmGcStoreWalkHeldBack" "KvcmGcUnregisteredInstanceKeys" "KvcmGcKvcmCountersDrift"))
    (dict "name" "kvcm-gc" "alerts" (list "KvcmGcScannersHoldNoLease" "KvcmGcScannerMetricsAbsent" "KvcmGcDeleterStuckAtCap" "KvcmGcDeadLetters" "KvcmGcDeliveriesUnanswered" "KvcmGcOperationErrors" "KvcmGcJetStreamStatsUnavailable" "KvcmGcStreamDiscarding" "KvcmGcStagePausedLong"))
    (dict "name" "kvcm-gc-stuck-deleting" "alerts" (list "KvcmGcStuckDeletingLeaseTooLong" "KvcmGcStuckDeletingUnobserved" "KvcmGcStuckDeletingDataLeft" "KvcmGcAmbiguousLayoutKeys"))
    (dict "name" "kvcm-gc-sweep" "alerts" (list "KvcmGcSweepNoWalkCompleted" "KvcmGcSweepQuarantineStranded" "KvcmGcSweepConflicts" "KvcmGcSweepRestores" "KvcmGcSweepErrors"))
-}}
{{- $overrides := $pr.alerts | default dict -}}
{{- range $name, $_ := $overrides -}}
{{- if not (hasKey $defaults $name) -}}
{{- fail (printf "monitoring.prometheusRule.alerts.%s: no such alert" $name) -}}
{{- end -}}
{{- end -}}
groups:
{{- $emitted := 0 }}
{{- range $g := $groups }}
{{- $rules := list }}
{{- range $name := $g.alerts }}
{{- $d := index $defaults $name }}
{{- $o := index $overrides $name | default dict }}
{{- $what := printf "monitoring.prometheusRule.alerts.%s" $name }}
{{- if or (not (hasKey $o "enabled")) $o.enabled }}
{{- $a := dict "name" $name "w" $w "url" $pr.runbookURL "severity" (default $d.severity $o.severity) }}
{{- $_ := set $a "labels" (merge (dict "severity" $a.severity) ($pr.additionalLabels | default dict)) }}
{{- $_ := set $a "for" (include "kvcm-gc.seconds" (dict "d" (ternary $o.for $d.for (hasKey $o "for")) "what" (printf "%s.for" $what)) | int64) }}
{{- if hasKey $o "threshold" }}
{{- if not (hasKey $d "threshold") }}
{{- fail (printf "%s.threshold: the alert has none (set its for)" $what) }}
{{- end }}
{{- end }}
{{- if hasKey $d "threshold" }}
{{- $t := ternary $o.threshold $d.threshold (hasKey $o "threshold") }}
{{- if $d.duration }}
{{- $_ := set $a "seconds" (include "kvcm-gc.seconds" (dict "d" $t "what" (printf "%s.threshold" $what)) | int64) }}
{{- $_ := set $a "t" (include "kvcm-gc.promDuration" $a.seconds) }}
{{- else }}
{{- /* --set gives a fraction as a string. */}}
{{- if not (regexMatch "^[0-9]+(\\.[0-9]+)?([eE][-+]?[0-9]+)?$" (toString $t)) }}
{{- fail (printf "%s.threshold: %v is not a number" $what $t) }}
{{- end }}
{{- $_ := set $a "t" (toString $t) }}
{{- end }}
{{- end }}
{{- $rules = append $rules (include (printf "kvcm-gc.alert.%s" $name) $a | replace "[[" "{{" | replace "]]" "}}") }}
{{- end }}
{{- end }}
{{- if $rules }}
{{- if $emitted }}
{{ end }}
{{- $emitted = add1 $emitted }}
  - name: {{ $g.name }}
    rules:
{{- range $i, $r := $rules }}
{{- if $i }}
{{ end }}
      {{- $r | nindent 6 }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The lines every rule shares after its expression: for, labels. */}}
{{- define "kvcm-gc.alertFor" -}}
{{- if gt (int64 .for) 0 -}}
for: {{ include "kvcm-gc.promDuration" .for }}
{{ end -}}
labels:
  {{- toYaml .labels | nindent 2 }}
{{- end -}}

{{- define "kvcm-gc.runbookURL" -}}{{ .url }}#{{ lower .name }}{{- end -}}

{{- define "kvcm-gc.alert.KvcmGcNoRoundCompleted" -}}
- alert: KvcmGcNoRoundCompleted
  # No new round of the store began in {{ .t }} (by default round_pause, {{ .w.roundPause }}, +
  # a round, roundDuration {{ .w.round }}): the round id only moves when a round ends and, after
  # the pause, the next begins. The id {{ .t }} ago and every id since are compared across
  # whichever scanners held the store.
  expr: |
    max by (namespace, store) (max_over_time(kvcm_gc_store_round[{{ .t }}]))
      <= max by (namespace, store) (kvcm_gc_store_round offset {{ .t }})
  {{- include "kvcm-gc.alertFor" . | nindent 2 }}
  annotations:
    summary: No scan round of metadata store [[ $labels.store ]] has completed for longer than the round pause plus a round.
    description: >-
      The store's round id has not moved for {{ .t }}, so its garbage is not being collected.
      `kvcm-gc status` shows its walk, its lease holder and why it waits.
    runbook_url: {{ include "kvcm-gc.runbookURL" . }}
{{- end -}}

{{- define "kvcm-gc.alert.KvcmGcStoreNoLease" -}}
- alert: KvcmGcStoreNoLease
  # A store of KVCM's registry (every scanner replica exports the stores it read there)
  # that no scanner holds. The lease TTL is 15s and a free store is taken at the next
  # cycle, so {{ include "kvcm-gc.promDuration" .for }} is no handover. It fires for as long as nobody walks the store, and
  # ends when a scanner takes it or the store leaves the registry.
  expr: |
    max by (namespace, store) (kvcm_gc_store_registered)
      unless on (namespace, store)
    max by (namespace, store) (kvcm_gc_store_lease_held == 1)
  {{- include "kvcm-gc.alertFor" . | nindent 2 }}
  annotations:
    summary: No kvcm-gc scanner holds the lease of metadata store [[ $labels.store ]].
    description: >-
      The store is in KVCM's registry and has had no lease holder for {{ include "kvcm-gc.promDuration" .for }}, so nobody
      walks it and its garbage is not collected.
    runbook_url: {{ include "kvcm-gc.runbookURL" . }}
{{- end -}}

{{- define "kvcm-gc.alert.KvcmGcStoreWalkErrors" -}}
- alert: KvcmGcStoreWalkErrors
  # The walk waits after a failed SCAN, read, checkpoint or publish, then retries: in the
  # error state for more than {{ .t }} of half an hour, it is not healing on its own.
  expr: |
    max by (namespace, store) (avg_over_time(kvcm_gc_store_walk_state{state="error"}[30m])) > {{ .t }}
  {{- include "kvcm-gc.alertFor" . | nindent 2 }}
  annotations:
    summary: The walk of metadata store [[ $labels.store ]] keeps failing.
    description: >-
      The store's walk spent more than {{ .t }} of the last 30 minutes waiting after errors. The
      scanner's log names the failing operation; `kvcm-gc status` shows the walk.
    runbook_url: {{ include "kvcm-gc.runbookURL" . }}
{{- end -}}

{{- define "kvcm-gc.alert.KvcmGcStoreRoundFailed" -}}
- alert: KvcmGcStoreRoundFailed
  # The store's last round ended failed: its SCAN kept failing for scan_failure_budget, or the
  # store could not be opened. Set from the store's checkpoint, so it survives a restart or a
  # move of the lease; it clears when a round of the store completes. Failed rounds move the
  # round id, so KvcmGcNoRoundCompleted does not see them.
  expr: |
    max by (namespace, store) (kvcm_gc_store_round_failed) > 0
  {{- include "kvcm-gc.alertFor" . | nindent 2 }}
  annotations:
    summary: The last scan round of metadata store [[ $labels.store ]] failed.
    description: >-
      The store's SCAN kept failing until its round gave up (scan_failure_budget), or the store
      could not be opened; its next round starts over after failed_round_pause. The other
      stores' rounds go on. `kvcm-gc status` shows the failed round and its last error.
    runbook_url: {{ include "kvcm-gc.runbookURL" . }}
{{- end -}}

{{- define "kvcm-gc.alert.KvcmGcStoreWalkStuck" -}}
- alert: KvcmGcStoreWalkStuck
  # Scanning, yet no key read for {{ .t }}: a call that never returns, or a walk that no
  # longer moves its cursor.
  expr: |
    max by (namespace, store) (avg_over_time(kvcm_gc_store_walk_state{state="scanning"}[{{ .t }}])) > 0.9
      and on (namespace, store)
    sum by (namespace, store) (increase(kvcm_gc_store_scanned_keys_total[{{ .t }}])) == 0
  {{- include "kvcm-gc.alertFor" . | nindent 2 }}
  annotations:
    summary: The walk of metadata store [[ $labels.store ]] is scanning but reads no keys.
    description: >-
      The store's walk has been in the scanning state for {{ .t }} without reading a key.
      Check the store's Redis and the scanner holding its lease (`kvcm-gc status`).
    runbook_url: {{ include "kvcm-gc.runbookURL" . }}
{{- end -}}

{{- define "kvcm-gc.alert.KvcmGcStoreWalkHeldBack" -}}
- alert: KvcmGcStoreWalkHeldBack
  # Held by the prober's or the deleter's backlog (backpressure), or by a registry that
  # cannot be read (registry_backoff), for {{ .t }}: longer than a round should take
  # (roundDuration). A pause is an operator's choice (KvcmGcStagePausedLong).
  expr: |
    max by (namespace, store, state) (avg_over_time(kvcm_gc_store_walk_state{state=~"backpressure|registry_backoff"}[{{ .t }}])) > 0.9
  {{- include "kvcm-gc.alertFor" . | nindent 2 }}
  annotations:
    summary: The walk of metadata store [[ $labels.store ]] has been held back ([[ $labels.state ]]) for {{ .t }}.
    description: >-
      The walk waits instead of scanning: for the prober's or the deleter's backlog to drain
      (backpressure) or for the registry to answer (registry_backoff).
    runbook_url: {{ include "kvcm-gc.runbookURL" . }}
{{- end -}}

{{- define "kvcm-gc.alert.KvcmGcUnregisteredInstanceKeys" -}}
- alert: KvcmGcUnregisteredInstanceKeys
  # Locations in keys of an instance KVCM's registry no longer lists (a RemoveInstance
  # whose trim failed), first counted more than {{ .t }} ago (keys emptied by
  # collect_unregistered_instances with empty_block: keep hold none): a removal trims its
  # keys within minutes, so these stay until collect_unregistered_instances or an operator
  # removes them. The counts are set at a round's end and move with the store's lease.
  expr: |
    max by (namespace, store, kvcm_instance) (kvcm_gc_unregistered_instance_locations) > 0
      and on (namespace, store, kvcm_instance)
    time() - max by (namespace, store, kvcm_instance) (kvcm_gc_unregistered_instance_first_seen_timestamp_seconds) > {{ .seconds }}
  {{- include "kvcm-gc.alertFor" . | nindent 2 }}
  annotations:
    summary: Metadata store [[ $labels.store ]] holds keys of instance [[ $labels.kvcm_instance ]], which KVCM's registry no longer lists.
    description: >-
      A removed instance's keys were left behind for more than {{ .t }}, and their data files
      with them. `kvcm-gc status` lists them under UNREGISTERED INSTANCES with their
      locations and bytes; collect_unregistered_instances removes them after
      unregistered_grace.
    runbook_url: {{ include "kvcm-gc.runbookURL" . }}
{{- end -}}

{{- define "kvcm-gc.alert.KvcmGcKvcmCountersDrift" -}}
- alert: KvcmGcKvcmCountersDrift
  # KVCM's persisted usage of an instance exceeds what the scanner recounted by more than
  # {{ .t }} of its group's quota.capacity, at the drift range's low bound (what the round
  # shows at least), summed over the storage types KVCM's reclaimer compares with its quota
  # (not unknown, not EventReport's). KVCM has no quota per instance: each instance is
  # compared with its group's whole quota, so several drifting instances of one group can
  # together pass the share unseen. The for of a round's period (round_pause + a round) asks
  # the next round's audit to agree. The series are set at a round's end and move with the
  # store's lease (max over the replicas that exported them).
  expr: |
    max by (namespace, store, kvcm_instance) (
      sum by (namespace, pod, store, kvcm_instance) (kvcm_gc_kvcm_usage_drift_bytes{bound="low", storage_type!~"unknown|event_report_.*"})
    )
      > {{ .t }} * max by (namespace, store, kvcm_instance) (kvcm_gc_kvcm_quota_bytes > 0)
  {{- include "kvcm-gc.alertFor" . | nindent 2 }}
  annotations:
    summary: KVCM counts more bytes for instance [[ $labels.kvcm_instance ]] than metadata store [[ $labels.store ]] holds, past the alert's share of its group's quota.
    description: >-
      KVCM's persisted usage of the instance has stayed above the scanner's recount by more
      than {{ .t }} of its group's quota for a round's period. KVCM's reclaimer counts these
      bytes against the quota and evicts live cache to make room for them. `kvcm-gc status`
      shows the drift per storage type and how much of it kvcm-gc's own deletes explain;
      `kvcm-gc counters repair`, during a stop of every KVCM replica, rewrites the counters
      to the recount.
    runbook_url: {{ include "kvcm-gc.runbookURL" . }}
{{- end -}}

{{- define "kvcm-gc.alert.KvcmGcScannersHoldNoLease" -}}
- alert: KvcmGcScannersHoldNoLease
  # Scanner replicas are up (they export the gauge) and none walks any store.
  expr: |
    sum by (namespace) (kvcm_gc_scanner_lease_held) == 0
  {{- include "kvcm-gc.alertFor" . | nindent 2 }}
  annotations:
    summary: No kvcm-gc scanner holds a metadata store lease.
    description: >-
      The scanner replicas run but walk no store, so nothing is scanned. Check their NATS
      connection and their readiness (/readyz), and `kvcm-gc status` for the leases.
    runbook_url: {{ include "kvcm-gc.runbookURL" . }}
{{- end -}}

{{- define "kvcm-gc.alert.KvcmGcScannerMetricsAbsent" -}}
- alert: KvcmGcScannerMetricsAbsent
  # Per deployment (namespace): kvcm-gc processes are scraped there (every one exports
  # kvcm_gc_build_info) but no scanner (a process running the scanner exports
  # kvcm_gc_jetstream_stats_up{stage="scanner"} at every scrape). A global absent()
  # would stay quiet while any other deployment's scanner is scraped.
  expr: |
    group by (namespace) (kvcm_gc_build_info)
      unless on (namespace)
    group by (namespace) (kvcm_gc_jetstream_stats_up{stage="scanner"})
  {{- include "kvcm-gc.alertFor" . | nindent 2 }}
  annotations:
    summary: No kvcm-gc scanner is scraped.
    description: >-
      Prometheus scrapes kvcm-gc processes of this deployment but no scanner: either none
      runs, or its scrape fails. Nothing is scanned, and the per-store alerts cannot fire.
    runbook_url: {{ include "kvcm-gc.runbookURL" . }}
{{- end -}}

{{- define "kvcm-gc.alert.KvcmGcDeleterStuckAtCap" -}}
- alert: KvcmGcDeleterStuckAtCap
  # In flight at the cap (max_inflight_delete_requests) and nothing acknowledged: the
  # deleters hold their whole window without finishing any request, and scanning stops
  # once the backlog passes the high-water mark.
  expr: |
    (
      max by (namespace) (kvcm_gc_consumer_ack_pending_messages{stage="deleter"})
        >= max by (namespace) (kvcm_gc_consumer_max_ack_pending_messages{stage="deleter"})
    )
    and on (namespace)
    (sum by (namespace) (rate(kvcm_gc_messages_total{stage="deleter", result="ack"}[15m])) == 0)
  {{- include "kvcm-gc.alertFor" . | nindent 2 }}
  annotations:
    summary: kvcm-gc deleters are at their in-flight cap and finish nothing.
    description: >-
      Every in-flight delete request slot is taken and none was acknowledged for 15 minutes.
      Look for slow storage deletes, a Redis outage or a long delete_delay in the deleters'
      logs; `kvcm-gc status` shows the redelivered count.
    runbook_url: {{ include "kvcm-gc.runbookURL" . }}
{{- end -}}

{{- define "kvcm-gc.alert.KvcmGcDeadLetters" -}}
- alert: KvcmGcDeadLetters
  # A message terminated as poison or dead-lettered after max_deliver failed deliveries.
  expr: |
    sum by (namespace, stage) (increase(kvcm_gc_messages_total{result="term"}[1h])) > {{ .t }}
  {{- include "kvcm-gc.alertFor" . | nindent 2 }}
  annotations:
    summary: kvcm-gc [[ $labels.stage ]] gave up on messages in the last hour.
    description: >-
      Messages were terminated by the [[ $labels.stage ]]. List them with `kvcm-gc dlq list`,
      fix the cause, and re-publish with `kvcm-gc dlq retry`.
    runbook_url: {{ include "kvcm-gc.runbookURL" . }}
{{- end -}}

{{- define "kvcm-gc.alert.KvcmGcDeliveriesUnanswered" -}}
- alert: KvcmGcDeliveriesUnanswered
  # A message whose last allowed delivery was never answered: its handler hung past the
  # ack wait, or its process died holding it. The server gave up on it (its
  # max-deliveries advisory) and the stage recorded a deadletter event.
  expr: |
    sum by (namespace, stage) (increase(kvcm_gc_messages_total{result="max_deliveries"}[1h])) > {{ .t }}
  {{- include "kvcm-gc.alertFor" . | nindent 2 }}
  annotations:
    summary: kvcm-gc [[ $labels.stage ]] left messages unanswered until the server gave up on them.
    description: >-
      The last allowed delivery of messages of the [[ $labels.stage ]] timed out without a
      verdict (a handler that hung, or a process that died holding them). List them with
      `kvcm-gc dlq list`, find why the stage hung or died, and re-publish with
      `kvcm-gc dlq retry`.
    runbook_url: {{ include "kvcm-gc.runbookURL" . }}
{{- end -}}

{{- define "kvcm-gc.alert.KvcmGcOperationErrors" -}}
- alert: KvcmGcOperationErrors
  expr: |
    sum by (namespace, stage, op) (rate(kvcm_gc_operation_errors_total[10m])) > {{ .t }}
  {{- include "kvcm-gc.alertFor" . | nindent 2 }}
  annotations:
    summary: kvcm-gc [[ $labels.stage ]] fails [[ $labels.op ]] operations.
    description: >-
      [[ $labels.op ]] operations have failed more than {{ .t }} times a second in the
      [[ $labels.stage ]] for {{ include "kvcm-gc.promDuration" .for }}; its log names the errors.
    runbook_url: {{ include "kvcm-gc.runbookURL" . }}
{{- end -}}

{{- define "kvcm-gc.alert.KvcmGcJetStreamStatsUnavailable" -}}
- alert: KvcmGcJetStreamStatsUnavailable
  expr: |
    max by (namespace, stage) (kvcm_gc_jetstream_stats_up) == 0
  {{- include "kvcm-gc.alertFor" . | nindent 2 }}
  annotations:
    summary: kvcm-gc [[ $labels.stage ]] cannot read its JetStream consumer.
    description: >-
      The consumer info or the state bucket cannot be read; the consumer may be missing.
      Meanwhile the consumer gauges hold the last values read, and
      kvcm_gc_consumer_info_age_seconds says how old they are.
    runbook_url: {{ include "kvcm-gc.runbookURL" . }}
{{- end -}}

{{- define "kvcm-gc.alert.KvcmGcStreamDiscarding" -}}
- alert: KvcmGcStreamDiscarding
  # A stream at its max_bytes: each message stored discards the oldest (discard old).
  expr: |
    max by (namespace, stream) (kvcm_gc_stream_discarding) > 0
      or max by (namespace, stream) (kvcm_gc_stream_lost_messages) > 0
  {{- include "kvcm-gc.alertFor" . | nindent 2 }}
  annotations:
    summary: kvcm-gc stream [[ $labels.stream ]] is at its max_bytes and discards its oldest messages.
    description: >-
      The stream holds less than its max_age. Discarded batches or delete requests not yet
      consumed are work not done this round (never a deletion: the next round finds the
      garbage again), and the audit trail is shorter. kvcm_gc_stream_lost_messages counts
      the messages discarded before their consumer acknowledged them.
    runbook_url: {{ include "kvcm-gc.runbookURL" . }}
{{- end -}}

{{- define "kvcm-gc.alert.KvcmGcStagePausedLong" -}}
- alert: KvcmGcStagePausedLong
  # A pause forgotten by an operator: resume with `kvcm-gc resume <stage>`.
  expr: |
    max by (namespace, stage) (kvcm_gc_stage_paused) == 1
  {{- include "kvcm-gc.alertFor" . | nindent 2 }}
  annotations:
    summary: kvcm-gc [[ $labels.stage ]] has been paused for more than {{ include "kvcm-gc.promDuration" .for }}.
    description: >-
      `kvcm-gc status` shows until when; resume with `kvcm-gc resume [[ $labels.stage ]]` if
      the pause is no longer wanted.
    runbook_url: {{ include "kvcm-gc.runbookURL" . }}
{{- end -}}

{{- define "kvcm-gc.alert.KvcmGcStuckDeletingLeaseTooLong" -}}
- alert: KvcmGcStuckDeletingLeaseTooLong
  # collect_deleting: a group whose delay_before_delete_ms (KVCM's read lease for clients
  # holding the URI of a location it deletes) plus 1h exceeds deleting_grace is never
  # collected; its stuck DELETING pile up until the grace is raised. Counted over a round's
  # period ({{ .w.period }}), so the last round's skips are always in the window.
  expr: |
    sum by (namespace) (increase(kvcm_gc_prober_skips_total{reason="deleting_lease_too_long"}[{{ .w.period }}])) > {{ .t }}
  {{- include "kvcm-gc.alertFor" . | nindent 2 }}
  annotations:
    summary: kvcm-gc keeps the stuck DELETING of a group whose delete delay does not fit deleting_grace.
    description: >-
      DELETING locations were kept in the last {{ .w.period }} because their group's
      delay_before_delete_ms + 1h exceeds deleting_grace. Raise deleting_grace above every
      group's delay (the prober's log names the group), or accept that those stay.
    runbook_url: {{ include "kvcm-gc.runbookURL" . }}
{{- end -}}

{{- define "kvcm-gc.alert.KvcmGcStuckDeletingUnobserved" -}}
- alert: KvcmGcStuckDeletingUnobserved
  # Location layout: the age of a DELETING is kvcm-gc's own first sight, kept in the
  # OBSERVED bucket. A sight that cannot be recorded keeps the location, round after round.
  expr: |
    sum by (namespace) (rate(kvcm_gc_prober_skips_total{reason="deleting_unobserved"}[15m])) > {{ .t }}
  {{- include "kvcm-gc.alertFor" . | nindent 2 }}
  annotations:
    summary: kvcm-gc cannot record when it first saw DELETING locations.
    description: >-
      The prober fails to read or write the OBSERVED bucket, so no stuck DELETING of the
      location layout is collected. Check the bucket (`nats kv info`) and the prober's logs.
    runbook_url: {{ include "kvcm-gc.runbookURL" . }}
{{- end -}}

{{- define "kvcm-gc.alert.KvcmGcStuckDeletingDataLeft" -}}
- alert: KvcmGcStuckDeletingDataLeft
  # A collected stuck DELETING whose data may have been reused (a shared file, pace
  # offsets, mooncake keys, a name another location uses) loses its metadata only: the
  # space stays taken until the storage's own tools reclaim it. Counted over a round's
  # period ({{ .w.period }}).
  expr: |
    sum by (namespace, storage_type, reason) (increase(kvcm_gc_stuck_deleting_data_left_total[{{ .w.period }}])) > {{ .t }}
  {{- include "kvcm-gc.alertFor" . | nindent 2 }}
  annotations:
    summary: kvcm-gc left the [[ $labels.storage_type ]] data of stuck DELETING locations in place ([[ $labels.reason ]]).
    description: >-
      Spec URIs of collected stuck DELETING locations kept their data in the last {{ .w.period }}
      because it may be another block's now. The deleter's delete events (reason stuck_deleting)
      name them, `kvcm-gc status` counts them; reclaim the space with the storage's own tools.
    runbook_url: {{ include "kvcm-gc.runbookURL" . }}
{{- end -}}

{{- define "kvcm-gc.alert.KvcmGcAmbiguousLayoutKeys" -}}
- alert: KvcmGcAmbiguousLayoutKeys
  # A key holding both a legacy __uri__ and L# fields (an upgrade mid-write): nothing in
  # it is judged or written (invariant 9), so its garbage stays until KVCM rewrites it.
  # Counted over a round's period ({{ .w.period }}).
  expr: |
    sum by (namespace) (increase(kvcm_gc_prober_skips_total{reason="ambiguous_layout"}[{{ .w.period }}])) > {{ .t }}
  {{- include "kvcm-gc.alertFor" . | nindent 2 }}
  annotations:
    summary: kvcm-gc met block keys holding both KVCM layouts and left them alone.
    description: >-
      Blocks held both __uri__ and L# fields in the last {{ .w.period }}. None of their
      locations is collected; the prober's skip events name the keys.
    runbook_url: {{ include "kvcm-gc.runbookURL" . }}
{{- end -}}

{{- define "kvcm-gc.alert.KvcmGcSweepNoWalkCompleted" -}}
- alert: KvcmGcSweepNoWalkCompleted
  # {{ .t }}: by default sweep_round_pause ({{ .w.sweepPause }}) + a walk (walkDuration,
  # {{ .w.walk }}), per swept storage. The walker leading a storage exports its last walk's end
  # (from the checkpoint when it takes the lease over), so the look-back spans a move
  # between walkers and a while with no leader. Fires only for storages a walker has walked.
  expr: |
    time() - max by (namespace, storage) (max_over_time(kvcm_gc_sweep_last_round_end_timestamp_seconds[{{ include "kvcm-gc.promDuration" (max 259200 (mul 2 .seconds)) }}]) > 0) > {{ .seconds }}
  {{- include "kvcm-gc.alertFor" . | nindent 2 }}
  annotations:
    summary: No walk of swept storage [[ $labels.storage ]] has completed for longer than sweep_round_pause plus a walk.
    description: >-
      No walker has ended a walk of the storage for {{ .t }}. `kvcm-gc status` shows each
      swept storage's walker, walk progress and quarantine; see the walker's logs.
    runbook_url: {{ include "kvcm-gc.runbookURL" . }}
{{- end -}}

{{- define "kvcm-gc.alert.KvcmGcSweepQuarantineStranded" -}}
- alert: KvcmGcSweepQuarantineStranded
  # A file stays in quarantine sweep_quarantine ({{ .w.quarantine }}) and at most half of it
  # more before a look brings it back to a sweeper; one there for {{ .t }} (by default four
  # times sweep_quarantine) is not being finished or undone.
  expr: |
    min by (namespace, storage) (kvcm_gc_sweep_quarantine_oldest_timestamp_seconds > 0) < time() - {{ .seconds }}
  {{- include "kvcm-gc.alertFor" . | nindent 2 }}
  annotations:
    summary: A file has stayed in the quarantine of swept storage [[ $labels.storage ]] for more than {{ .t }}.
    description: >-
      Files in quarantine are re-checked and unlinked, or moved back, after sweep_quarantine.
      Check the sweepers (running, the SWEEP section of `kvcm-gc status`, their logs) and
      `kvcm-gc replay --stage sweeper --file <path>` for the file's steps.
    runbook_url: {{ include "kvcm-gc.runbookURL" . }}
{{- end -}}

{{- define "kvcm-gc.alert.KvcmGcSweepConflicts" -}}
- alert: KvcmGcSweepConflicts
  # A quarantined file that a location named again could not go back: its path holds a
  # newer file. Both are kept; an operator decides.
  expr: |
    max by (namespace, storage) (kvcm_gc_sweep_quarantine_conflicts) > 0
  {{- include "kvcm-gc.alertFor" . | nindent 2 }}
  annotations:
    summary: Conflict copies wait in the quarantine of swept storage [[ $labels.storage ]].
    description: >-
      Quarantined files could not be moved back because their data path was taken meanwhile.
      They keep the name <path>~<µs>.conflict in the quarantine and are never removed by
      kvcm-gc: compare them with the file at the path and remove one.
    runbook_url: {{ include "kvcm-gc.runbookURL" . }}
{{- end -}}

{{- define "kvcm-gc.alert.KvcmGcSweepRestores" -}}
- alert: KvcmGcSweepRestores
  # Moving a file back means a location named it after a sweeper had judged it orphan: a
  # write that raced the sweep (expected now and then) or metadata written back from an
  # outside copy. Many in an hour is worth a look.
  expr: |
    sum by (namespace) (increase(kvcm_gc_sweep_restored_files_total[1h])) > {{ .t }}
  {{- include "kvcm-gc.alertFor" . | nindent 2 }}
  annotations:
    summary: kvcm-gc sweepers moved more than {{ .t }} files back out of quarantine in the last hour.
    description: >-
      Each restore is a `sweep` event with the file and the reason; `kvcm-gc replay --stage
      sweeper --file <path>` explains one.
    runbook_url: {{ include "kvcm-gc.runbookURL" . }}
{{- end -}}

{{- define "kvcm-gc.alert.KvcmGcSweepErrors" -}}
- alert: KvcmGcSweepErrors
  expr: |
    sum by (namespace, stage, reason) (rate(kvcm_gc_sweep_errors_total[10m])) > {{ .t }}
  {{- include "kvcm-gc.alertFor" . | nindent 2 }}
  annotations:
    summary: kvcm-gc [[ $labels.stage ]] fails its sweep's [[ $labels.reason ]] operations.
    description: >-
      [[ $labels.reason ]] operations have failed more than {{ .t }} times a second for
      {{ include "kvcm-gc.promDuration" .for }}; the work is retried. See the [[ $labels.stage ]]'s logs.
    runbook_url: {{ include "kvcm-gc.runbookURL" . }}
{{- end -}}
