#!/bin/sh
# Generated from deploy/kubernetes/configmap.yaml by `go generate ./deploy`; do not edit.
#
# Creates kvcm-gc's streams, durable consumers and KV buckets for cluster "kvcm-prod" with prefix "kvcmgc",
# as a NATS user allowed to manage JetStream, for deployments whose stages run with
# jetstream.skip_ensure. Later changes: nats stream edit / nats consumer edit, or a stage run
# once without skip_ensure, which updates what the server allows and names what it refuses.
set -eu
cd "$(dirname "$0")"
nats stream add KVCMGC_kvcmgc_kvcm-prod_BATCHES --config KVCMGC_kvcmgc_kvcm-prod_BATCHES.stream.json
nats stream add KVCMGC_kvcmgc_kvcm-prod_DELETES --config KVCMGC_kvcmgc_kvcm-prod_DELETES.stream.json
nats stream add KVCMGC_kvcmgc_kvcm-prod_EVENTS --config KVCMGC_kvcmgc_kvcm-prod_EVENTS.stream.json
nats stream add KVCMGC_kvcmgc_kvcm-prod_SWEEP --config KVCMGC_kvcmgc_kvcm-prod_SWEEP.stream.json
nats consumer add KVCMGC_kvcmgc_kvcm-prod_BATCHES prober --config KVCMGC_kvcmgc_kvcm-prod_BATCHES.prober.consumer.json
nats consumer add KVCMGC_kvcmgc_kvcm-prod_DELETES deleter --config KVCMGC_kvcmgc_kvcm-prod_DELETES.deleter.consumer.json
nats consumer add KVCMGC_kvcmgc_kvcm-prod_SWEEP sweeper --config KVCMGC_kvcmgc_kvcm-prod_SWEEP.sweeper.consumer.json
nats kv add KVCMGC_kvcmgc_kvcm-prod_STATE --history 1 --storage file --replicas 3 --description 'kvcm-gc scanner checkpoint and schedule of KVCM cluster "kvcm-prod"'
nats kv add KVCMGC_kvcmgc_kvcm-prod_LEASE --history 1 --storage file --replicas 3 --ttl 15s --description 'kvcm-gc scanner leader lease of KVCM cluster "kvcm-prod"'
nats kv add KVCMGC_kvcmgc_kvcm-prod_OBSERVED --history 1 --storage file --replicas 3 --description 'kvcm-gc prober observations (first sight of a DELETING location) of KVCM cluster "kvcm-prod"'
