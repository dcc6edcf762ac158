{{/* The chart's name and the release's full name. */}}
{{- define "kvcm-gc.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kvcm-gc.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object; selector labels of a component. */}}
{{- define "kvcm-gc.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "kvcm-gc.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kvcm-gc
{{- end -}}

{{- define "kvcm-gc.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kvcm-gc.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "kvcm-gc.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kvcm-gc.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The ServiceAccount of the ensure hook's pod. The release's own is created only after the
     pre-install hooks, so the ServiceAccount admission would refuse a hook pod naming it:
     with serviceAccount.create the hook brings its own, created as a hook before the Job. */}}
{{- define "kvcm-gc.ensureServiceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- printf "%s-ensure" (include "kvcm-gc.fullname" .) -}}
{{- else -}}
{{- include "kvcm-gc.serviceAccountName" . -}}
{{- end -}}
{{- end -}}

{{/* The events the ensure hook runs at, the same for each of its objects. */}}
{{- define "kvcm-gc.ensureHook" -}}pre-install,pre-upgrade,pre-rollback{{- end -}}

{{/* The image: the digest when set, else the tag, else the chart's appVersion. */}}
{{- define "kvcm-gc.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* KVCM's cluster: kvcm.cluster, else the cluster_name parameter of the registry URI. */}}
{{- define "kvcm-gc.cluster" -}}
{{- if .Values.kvcm.cluster -}}
{{- .Values.kvcm.cluster -}}
{{- else -}}
{{- $m := regexFind "[?&]cluster_name=[^&#]+" .Values.kvcm.registryURI -}}
{{- if not $m -}}
{{- fail "kvcm.cluster is empty and kvcm.registryURI has no cluster_name parameter: set one of them" -}}
{{- end -}}
{{- regexReplaceAll "^[?&]cluster_name=" $m "" -}}
{{- end -}}
{{- end -}}

{{/* KVCMGC_<prefix>_<cluster>, the start of every stream and bucket name. kvcm-gc keeps a
     component of [a-z0-9-] (1 to 32 bytes, no "--") as is and hashes any other; the chart
     does not hash, so such a name needs privileges.objectsPrefix. */}}
{{- define "kvcm-gc.objects" -}}
{{- if .Values.privileges.objectsPrefix -}}
{{- .Values.privileges.objectsPrefix -}}
{{- else -}}
{{- $prefix := .Values.nats.subjectPrefix -}}
{{- $cluster := include "kvcm-gc.cluster" . -}}
{{- range list $prefix $cluster -}}
{{- if or (not (regexMatch "^[a-z0-9-]{1,32}$" .)) (contains "--" .) -}}
{{- fail (printf "%q is not made of [a-z0-9-]: set privileges.objectsPrefix to the KVCMGC_… prefix kvcm-gc status prints" .) -}}
{{- end -}}
{{- end -}}
{{- printf "KVCMGC_%s_%s" $prefix $cluster -}}
{{- end -}}
{{- end -}}

{{/* What each identity reads: the registry, the metadata stores; and how it mounts storages. */}}
{{- define "kvcm-gc.needs" -}}
scanner: {registry: true, meta: true, mount: ""}
prober: {registry: true, meta: false, mount: probe}
deleter: {registry: false, meta: true, mount: delete}
walker: {registry: true, meta: false, mount: sweepRead}
sweeper: {registry: true, meta: true, mount: sweepWrite}
admin: {registry: true, meta: true, mount: ""}
{{- end -}}

{{/* The stages deployed: the walker and the sweeper only when a storage is swept. */}}
{{- define "kvcm-gc.stages" -}}
{{- $sweep := false -}}
{{- range $name, $s := .Values.storages -}}
{{- if $s.sweep -}}{{- $sweep = true -}}{{- end -}}
{{- end -}}
{{- range $name, $s := .Values.storages -}}
{{- if and $s.sweep (eq (toString $s.delete) "false") -}}
{{- fail (printf "storages.%s: sweep removes files, so it needs delete on" $name) -}}
{{- end -}}
{{- end -}}
{{- $out := list "scanner" "prober" "deleter" -}}
{{- if $sweep -}}{{- $out = concat $out (list "walker" "sweeper") -}}{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* The Secret of an identity. */}}
{{- define "kvcm-gc.secretName" -}}
{{- $v := ternary .root.Values.admin (index .root.Values.stages .stage | default dict) (eq .stage "admin") -}}
{{- default (printf "%s-%s" (include "kvcm-gc.fullname" .root) .stage) $v.existingSecret -}}
{{- end -}}

{{/* The NATS key of nats.auth in an identity's Secret ("" for none). */}}
{{- define "kvcm-gc.natsKey" -}}
{{- $auth := .Values.nats.auth -}}
{{- if eq $auth "userPassword" -}}nats-password
{{- else if eq $auth "nkey" -}}nats.nk
{{- else if eq $auth "creds" -}}nats.creds
{{- else if eq $auth "token" -}}nats-token
{{- else if ne $auth "none" -}}
{{- fail (printf "nats.auth %q: userPassword, nkey, creds, token or none" $auth) -}}
{{- end -}}
{{- end -}}

{{- define "kvcm-gc.secretDir" -}}/etc/kvcm-gc/secrets{{- end -}}

{{/* Whether a storage is mounted for a mount kind, and read-only. */}}
{{- define "kvcm-gc.mounts" -}}
{{- $out := list -}}
{{- $kind := .kind -}}
{{- range $name, $s := .root.Values.storages -}}
{{- $probe := default $.root.Values.defaultProbe $s.probe -}}
{{- $delete := ternary true $s.delete (kindIs "invalid" $s.delete) -}}
{{- $want := false -}}
{{- $ro := true -}}
{{- if and (eq $kind "probe") (eq $probe "stat") -}}{{- $want = true -}}{{- end -}}
{{- if and (eq $kind "delete") $delete -}}{{- $want = true -}}{{- $ro = false -}}{{- end -}}
{{- if and (eq $kind "sweepRead") $s.sweep -}}{{- $want = true -}}{{- end -}}
{{- if and (eq $kind "sweepWrite") $s.sweep -}}{{- $want = true -}}{{- $ro = false -}}{{- end -}}
{{- if and $want (or (not $s.volume) (not $s.mountPath)) (or (eq $probe "stat") $s.sweep) -}}
{{- fail (printf "storages.%s: probe stat and sweep read its files: give it a volume and a mountPath" $name) -}}
{{- end -}}
{{- if and $want $s.volume $s.mountPath -}}
{{- $vol := printf "storage-%s" (regexReplaceAll "[^a-z0-9-]+" (lower $name) "-") | trunc 63 | trimSuffix "-" -}}
{{- $out = append $out (dict "name" $vol "storage" $name "mountPath" $s.mountPath "readOnly" $ro "volume" $s.volume) -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* The configuration file of an identity (a stage or the admin), as YAML. */}}
{{- define "kvcm-gc.config" -}}
{{- $root := .root -}}
{{- $stage := .stage -}}
{{- $v := $root.Values -}}
{{- $needs := index (include "kvcm-gc.needs" $root | fromYaml) $stage -}}
{{- $sv := ternary $v.admin (index $v.stages $stage | default dict) (eq $stage "admin") -}}
{{- $dir := include "kvcm-gc.secretDir" $root -}}
{{- $c := deepCopy ($v.config | default dict) -}}
{{- if ne $stage "admin" -}}{{- $c = mergeOverwrite $c (deepCopy ($sv.config | default dict)) -}}{{- end -}}
{{- $redisUser := $sv.redisUser -}}
{{- $registry := dict "uri" $v.kvcm.registryURI -}}
{{- $meta := dict -}}
{{- $tls := dict -}}
{{- if $v.kvcm.redisTLS.caSecret -}}{{- $_ := set $tls "ca_file" "/etc/kvcm-gc/redis-ca/ca.crt" -}}{{- end -}}
{{- if $v.kvcm.redisTLS.serverName -}}{{- $_ := set $tls "server_name" $v.kvcm.redisTLS.serverName -}}{{- end -}}
{{- if $needs.registry -}}
{{- $_ := set $registry "username" $redisUser -}}
{{- $_ := set $registry "password_file" (printf "%s/registry-password" $dir) -}}
{{- if $tls -}}{{- $_ := set $registry "tls" $tls -}}{{- end -}}
{{- end -}}
{{- if $needs.meta -}}
{{- $_ := set $meta "username" $redisUser -}}
{{- $_ := set $meta "password_file" (printf "%s/meta-password" $dir) -}}
{{- if $tls -}}{{- $_ := set $meta "tls" $tls -}}{{- end -}}
{{- end -}}
{{- if $v.kvcm.storeURIs -}}{{- $_ := set $meta "store_uris" $v.kvcm.storeURIs -}}{{- end -}}
{{- if $v.kvcm.groupStoreURIs -}}{{- $_ := set $meta "group_store_uris" $v.kvcm.groupStoreURIs -}}{{- end -}}
{{- $overrides := dict -}}
{{- range $name, $s := $v.storages -}}
{{- $o := dict -}}
{{- if $s.probe -}}{{- $_ := set $o "probe" $s.probe -}}{{- end -}}
{{- if not (kindIs "invalid" $s.delete) -}}{{- $_ := set $o "delete" $s.delete -}}{{- end -}}
{{- if $s.sweep -}}{{- $_ := set $o "sweep" true -}}{{- end -}}
{{- if $s.pathMap -}}{{- $_ := set $o "path_map" $s.pathMap -}}{{- end -}}
{{- $_ := set $overrides $name $o -}}
{{- end -}}
{{- /* The prober reads the copy-target guard: on its own Redis (guard.uri) as its own user. */ -}}
{{- $guard := dict "kind" $v.guard.kind "prefix" $v.guard.prefix "uri" $v.guard.uri -}}
{{- if and (eq $stage "prober") (eq $v.guard.kind "redis") $v.guard.uri -}}
{{- $_ := set $guard "username" $redisUser -}}
{{- $_ := set $guard "password_file" (printf "%s/guard-password" $dir) -}}
{{- end -}}
{{- $nats := dict "url" $v.nats.url -}}
{{- $user := ternary $v.admin.natsUser $sv.natsUser (eq $stage "admin") -}}
{{- $key := include "kvcm-gc.natsKey" $root -}}
{{- if eq $v.nats.auth "userPassword" -}}
{{- $_ := set $nats "user" $user -}}
{{- $_ := set $nats "password_file" (printf "%s/%s" $dir $key) -}}
{{- else if eq $v.nats.auth "nkey" -}}
{{- $_ := set $nats "nkey_seed_file" (printf "%s/%s" $dir $key) -}}
{{- else if eq $v.nats.auth "creds" -}}
{{- $_ := set $nats "credentials_file" (printf "%s/%s" $dir $key) -}}
{{- else if eq $v.nats.auth "token" -}}
{{- $_ := set $nats "token_file" (printf "%s/%s" $dir $key) -}}
{{- end -}}
{{- $ntls := dict -}}
{{- if $v.nats.tls.caSecret -}}{{- $_ := set $ntls "ca_file" "/etc/kvcm-gc/nats-ca/ca.crt" -}}{{- end -}}
{{- if $v.nats.tls.clientCert -}}
{{- $_ := set $ntls "cert_file" (printf "%s/tls.crt" $dir) -}}
{{- $_ := set $ntls "key_file" (printf "%s/tls.key" $dir) -}}
{{- end -}}
{{- if $ntls -}}{{- $_ := set $nats "tls" $ntls -}}{{- end -}}
{{- $js := deepCopy (get $c "jetstream" | default dict) -}}
{{- /* Only the admin may create or change streams, consumers and buckets. */ -}}
{{- $_ := set $js "skip_ensure" (ne $stage "admin") -}}
{{- $log := deepCopy (get $c "log" | default dict) -}}
{{- $_ := set $log "format" "json" -}}
{{- $storage := dict "default_probe" $v.defaultProbe -}}
{{- if $overrides -}}{{- $_ := set $storage "overrides" $overrides -}}{{- end -}}
{{- $managed := dict
    "cluster" (include "kvcm-gc.cluster" $root)
    "subject_prefix" $v.nats.subjectPrefix
    "dry_run" (ternary $v.dryRun $sv.dryRun (kindIs "invalid" $sv.dryRun))
    "registry" $registry
    "meta" $meta
    "storage" $storage
    "guard" $guard
    "nats" $nats
    "jetstream" $js
    "http" (dict "listen" ":9090")
    "log" $log -}}
{{- $c = mergeOverwrite $c $managed -}}
{{- toYaml $c -}}
{{- end -}}

{{/* A byte count of a Kubernetes memory quantity (512Mi, 1Gi, 1G, 1000000). */}}
{{- define "kvcm-gc.bytes" -}}
{{- $q := toString . -}}
{{- $m := regexFind "^[0-9.]+" $q -}}
{{- $unit := trimPrefix $m $q -}}
{{- $mult := dict "" 1 "k" 1000 "K" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 -}}
{{- if not (hasKey $mult $unit) -}}
{{- fail (printf "memory quantity %q: use a number with Ki, Mi, Gi, Ti, k, M, G or T" $q) -}}
{{- end -}}
{{- mulf (float64 $m) (index $mult $unit) | int64 -}}
{{- end -}}

{{/* The environment of every kvcm-gc container: its NATS connection name, the Go runtime's
     memory limit and GC target. */}}
{{- define "kvcm-gc.env" -}}
- name: KVCMGC_NATS_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- with .resources }}{{ with .limits }}{{ with .memory }}
- name: GOMEMLIMIT
  value: {{ div (mul (include "kvcm-gc.bytes" .) $.root.Values.goRuntime.memoryLimitPercent) 100 | quote }}
{{- end }}{{ end }}{{ end }}
{{- with .root.Values.goRuntime.gogc }}
- name: GOGC
  value: {{ . | quote }}
{{- end }}
{{- with concat (.root.Values.extraEnv | default list) (.extraEnv | default list) }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The volumes and mounts of an identity: its configuration, its Secret, the TLS CAs, /tmp. */}}
{{- define "kvcm-gc.volumes" -}}
{{- $root := .root -}}
{{- $v := $root.Values -}}
{{- $needs := index (include "kvcm-gc.needs" $root | fromYaml) .stage -}}
{{- $key := include "kvcm-gc.natsKey" $root -}}
- name: config
  configMap:
    name: {{ .configMap }}
    items:
      - key: {{ .stage }}.yaml
        path: config.yaml
- name: secrets
  secret:
    secretName: {{ include "kvcm-gc.secretName" . }}
    defaultMode: 0444
    items:
      {{- if $needs.registry }}
      - {key: registry-password, path: registry-password}
      {{- end }}
      {{- if $needs.meta }}
      - {key: meta-password, path: meta-password}
      {{- end }}
      {{- if and (eq .stage "prober") (eq $v.guard.kind "redis") $v.guard.uri }}
      - {key: guard-password, path: guard-password}
      {{- end }}
      {{- if $key }}
      - {key: {{ $key }}, path: {{ $key }}}
      {{- end }}
      {{- if $v.nats.tls.clientCert }}
      - {key: tls.crt, path: tls.crt}
      - {key: tls.key, path: tls.key}
      {{- end }}
{{- if $v.nats.tls.caSecret }}
- name: nats-ca
  secret:
    secretName: {{ $v.nats.tls.caSecret }}
    defaultMode: 0444
    items:
      - {key: ca.crt, path: ca.crt}
{{- end }}
{{- if $v.kvcm.redisTLS.caSecret }}
- name: redis-ca
  secret:
    secretName: {{ $v.kvcm.redisTLS.caSecret }}
    defaultMode: 0444
    items:
      - {key: ca.crt, path: ca.crt}
{{- end }}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- range include "kvcm-gc.mounts" (dict "root" $root "kind" $needs.mount) | fromJsonArray }}
- name: {{ .name }}
  {{- toYaml .volume | nindent 2 }}
{{- end }}
{{- with include "kvcm-gc.extras" (dict "root" $root "stage" .stage "key" "extraVolumes") | fromJsonArray }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* A list value of every pod (.key: extraVolumes, extraVolumeMounts) followed by the stage's
     own, as JSON; the admin's pods take the global one only. */}}
{{- define "kvcm-gc.extras" -}}
{{- $v := .root.Values -}}
{{- $own := list -}}
{{- if ne .stage "admin" -}}{{- $own = get (index $v.stages .stage | default dict) .key | default list -}}{{- end -}}
{{- toJson (concat (get $v .key | default list) $own) -}}
{{- end -}}

{{/* The metadata of a pod: its labels (the chart's and the component's, which the selectors
     use and no podLabels value can change, then the stage's podLabels, then the global
     ones) and annotations (the checksum of its configuration, the prometheus.io ones, then
     the global podAnnotations and the stage's). .stage is the stage, or "" for an admin pod
     of .component. */}}
{{- define "kvcm-gc.podMetadata" -}}
{{- $v := .root.Values -}}
{{- $sv := dict -}}
{{- if .stage -}}{{- $sv = index $v.stages .stage | default dict -}}{{- end -}}
{{- $labels := include "kvcm-gc.labels" .root | fromYaml -}}
{{- $_ := set $labels "app.kubernetes.io/component" .component -}}
{{- if .stage -}}{{- $_ := set $labels "kvcm-gc/stage" "true" -}}{{- end -}}
{{- $labels = merge $labels ($sv.podLabels | default dict) ($v.podLabels | default dict) -}}
{{- $ann := dict -}}
{{- if and .stage $v.monitoring.podAnnotations -}}
{{- $ann = dict "prometheus.io/scrape" "true" "prometheus.io/port" "9090" "prometheus.io/path" "/metrics" -}}
{{- end -}}
{{- $ann = mergeOverwrite $ann ($v.podAnnotations | default dict) ($sv.podAnnotations | default dict) -}}
{{- with .checksum -}}{{- $_ := set $ann "checksum/config" . -}}{{- end -}}
labels:
  {{- toYaml $labels | nindent 2 }}
{{- with $ann }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Where a pod runs: its priority class (the stage's, else the global one), and for a stage
     its node selector, tolerations, affinity (by default, its replicas on different nodes)
     and topology spread constraints (a constraint without a labelSelector selects the
     stage's pods). */}}
{{- define "kvcm-gc.podPlacement" -}}
{{- $v := .root.Values -}}
{{- $sv := dict -}}
{{- if .stage -}}{{- $sv = index $v.stages .stage | default dict -}}{{- end -}}
{{- with $sv.priorityClassName | default $v.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- if .stage }}
{{- with $sv.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $sv.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
affinity:
  {{- if $sv.affinity }}
  {{- toYaml $sv.affinity | nindent 2 }}
  {{- else }}
  podAntiAffinity:
    # Replicas on different nodes, so a node's loss leaves the others walking.
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- include "kvcm-gc.selectorLabels" (dict "root" .root "component" .stage) | nindent 14 }}
  {{- end }}
{{- with $sv.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- range . }}
  {{- $c := deepCopy . }}
  {{- if not $c.labelSelector }}
  {{- $_ := set $c "labelSelector" (dict "matchLabels" (include "kvcm-gc.selectorLabels" (dict "root" $.root "component" $.stage) | fromYaml)) }}
  {{- end }}
  - {{ toYaml $c | indent 4 | trim }}
  {{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "kvcm-gc.volumeMounts" -}}
{{- $root := .root -}}
{{- $v := $root.Values -}}
{{- $needs := index (include "kvcm-gc.needs" $root | fromYaml) .stage -}}
- {name: config, mountPath: /etc/kvcm-gc/config.yaml, subPath: config.yaml, readOnly: true}
- {name: secrets, mountPath: {{ include "kvcm-gc.secretDir" $root }}, readOnly: true}
{{- if $v.nats.tls.caSecret }}
- {name: nats-ca, mountPath: /etc/kvcm-gc/nats-ca, readOnly: true}
{{- end }}
{{- if $v.kvcm.redisTLS.caSecret }}
- {name: redis-ca, mountPath: /etc/kvcm-gc/redis-ca, readOnly: true}
{{- end }}
- {name: tmp, mountPath: /tmp}
{{- range include "kvcm-gc.mounts" (dict "root" $root "kind" $needs.mount) | fromJsonArray }}
# storage {{ .storage }}
- {name: {{ .name }}, mountPath: {{ .mountPath }}, readOnly: {{ .readOnly }}}
{{- end }}
{{- with include "kvcm-gc.extras" (dict "root" $root "stage" .stage "key" "extraVolumeMounts") | fromJsonArray }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The container security context and the probes. */}}
{{- define "kvcm-gc.probes" -}}
livenessProbe:
  httpGet: {path: /healthz, port: http}
  {{- toYaml .Values.probes.liveness | nindent 2 }}
readinessProbe:
  httpGet: {path: /readyz, port: http}
  {{- toYaml .Values.probes.readiness | nindent 2 }}
{{- end -}}

{{/* A comma-separated list of quoted subjects, its placeholders filled in. */}}
{{- define "kvcm-gc.subjects" -}}
{{- $out := list -}}
{{- range .list -}}
{{- $s := . -}}
{{- range $k, $v := $.r -}}{{- $s = replace $k $v $s -}}{{- end -}}
{{- $out = append $out ($s | quote) -}}
{{- end -}}
{{- join ", " $out -}}
{{- end -}}

{{/* Refuses a credential in the values: a URI with userinfo (user:password@ or user@, in any
     value, nats.url's comma-separated list included) and a password or token key (the
     configuration's registry.password, nats.token, …). Every password comes from the
     identity's Secret, as a file; a value here would be rendered into a ConfigMap, and a
     store URI's userinfo would sign in instead of the stage's own ACL user. The error names
     the value and never prints the credential. */}}
{{- define "kvcm-gc.refuseCredentials" -}}
{{- $path := .path -}}
{{- if kindIs "map" .v -}}
{{- range $k, $v := .v -}}
{{- $p := ternary $k (printf "%s.%s" $path $k) (eq $path "") -}}
{{- if and (has (lower $k) (list "password" "token")) $v -}}
{{- fail (printf "%s: a credential in the values, which the chart would put in a ConfigMap: give it in the identity's Secret instead (docs/operating.md, The Secrets)" $p) -}}
{{- end -}}
{{- include "kvcm-gc.refuseCredentials" (dict "path" $p "v" $v) -}}
{{- end -}}
{{- else if kindIs "slice" .v -}}
{{- range $i, $v := .v -}}
{{- include "kvcm-gc.refuseCredentials" (dict "path" (printf "%s[%d]" $path $i) "v" $v) -}}
{{- end -}}
{{- else if and (kindIs "string" .v) (regexMatch "://[^/?#,]*@" .v) -}}
{{- fail (printf "%s: %q has userinfo: leave user:password@ out of every URI; each stage signs in as its own ACL user (stages.<stage>.redisUser, natsUser) with the password from its Secret" $path (regexReplaceAll "://[^/?#,]*@" .v "://***@")) -}}
{{- end -}}
{{- end -}}

{{/* The TCP ports of a list of URIs (.uris; a comma-separated list counts as several), each
     its authority's port or .default, as a JSON list. */}}
{{- define "kvcm-gc.uriPorts" -}}
{{- $out := list -}}
{{- range $u := .uris -}}
{{- range $one := splitList "," (toString $u) -}}
{{- $one = trim $one -}}
{{- if $one -}}
{{- $authority := regexReplaceAll "^[A-Za-z][A-Za-z0-9+.-]*://" $one "" -}}
{{- $authority = regexReplaceAll "[/?#].*$" $authority "" -}}
{{- $authority = regexReplaceAll "^.*@" $authority "" -}}
{{- $port := regexFind ":[0-9]+$" $authority | trimPrefix ":" -}}
{{- $out = append $out (ternary (int $port) (int $.default) (ne $port "")) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* The egress ports of the NetworkPolicy, as a sorted JSON list: NATS (nats.url) and Redis
     (every Redis URI of the values: the registry, the store and group URIs, the guard), and
     each one's extraPorts (the metadata stores KVCM's registry names are learned at run time:
     the values cannot say their ports). */}}
{{- define "kvcm-gc.egressPorts" -}}
{{- $v := .root.Values -}}
{{- $ports := list -}}
{{- if eq .kind "nats" -}}
{{- $ports = include "kvcm-gc.uriPorts" (dict "uris" (list $v.nats.url) "default" 4222) | fromJsonArray -}}
{{- else -}}
{{- $uris := list $v.kvcm.registryURI -}}
{{- $meta := (($v.config | default dict).meta | default dict) -}}
{{- range $m := list $v.kvcm.storeURIs $v.kvcm.groupStoreURIs $meta.store_uris $meta.group_store_uris -}}
{{- range $_, $u := ($m | default dict) -}}{{- $uris = append $uris $u -}}{{- end -}}
{{- end -}}
{{- if $v.guard.uri -}}{{- $uris = append $uris $v.guard.uri -}}{{- end -}}
{{- $ports = include "kvcm-gc.uriPorts" (dict "uris" $uris "default" 6379) | fromJsonArray -}}
{{- end -}}
{{- range (index $v.networkPolicy .kind).extraPorts -}}{{- $ports = append $ports (int .) -}}{{- end -}}
{{- $padded := list -}}
{{- range $p := $ports -}}{{- $padded = append $padded (printf "%05d" (int $p)) -}}{{- end -}}
{{- $out := list -}}
{{- range $p := $padded | uniq | sortAlpha -}}{{- $out = append $out (trimPrefix "0" $p | trimPrefix "0" | trimPrefix "0" | trimPrefix "0" | int) -}}{{- end -}}
{{- toJson $out -}}
{{- end -}}
