# kvcm-gc build, test and demo targets. Every target that needs servers starts its own.
GO       ?= go
PKGS     := ./...
FUZZTIME ?= 10s
STATICCHECK_VERSION ?= v0.8.2

# Tools the tests run, built from the module proxy into a cache on the machine, outside the
# checkout, one directory per tool and version (<tool>-<version>/): a clean clone reuses
# them, a warm `make tools` builds nothing, and a version bump rebuilds only that tool.
# KVCM_GC_TOOLS_CACHE moves the cache.
KVCM_GC_TOOLS_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/kvcm-gc/tools
TC                  := $(KVCM_GC_TOOLS_CACHE)
HELM_VERSION        ?= v4.3.2
PROMTOOL_VERSION    ?= v0.316.0
YQ_VERSION          ?= v4.54.3
KWOK_VERSION        ?= v0.8.0
PROM_OPERATOR_VERSION ?= v0.85.0
# The control plane of the chart's cluster tests is built from tools/kube/binaries, a module
# of its own whose go.mod pins Kubernetes and etcd: their versions are read from it.
KUBE_MOD            := $(CURDIR)/tools/kube/binaries
modversion           = $(shell awk '$$1 == "$(1)" && $$2 ~ /^v/ {print $$2; exit}' $(KUBE_MOD)/go.mod)
KUBE_VERSION        := $(call modversion,k8s.io/kubernetes)
ETCD_VERSION        := $(call modversion,go.etcd.io/etcd/server/v3)
$(if $(and $(KUBE_VERSION),$(ETCD_VERSION)),,$(error $(KUBE_MOD)/go.mod names no k8s.io/kubernetes or etcd server version))
STATICCHECK         := $(TC)/staticcheck-$(STATICCHECK_VERSION)/staticcheck
HELM                := $(TC)/helm-$(HELM_VERSION)/helm
PROMTOOL            := $(TC)/promtool-$(PROMTOOL_VERSION)/promtool
# yq runs the guide's commands that take the ACL file and the NATS account out of the chart.
YQ                  := $(TC)/yq-$(YQ_VERSION)/yq
KUBE_DIR            := $(TC)/kube-$(KUBE_VERSION)
ETCD_DIR            := $(TC)/etcd-$(ETCD_VERSION)
KWOK_DIR            := $(TC)/kwok-$(KWOK_VERSION)
CRDS_DIR            := $(TC)/prometheus-operator-crds-$(PROM_OPERATOR_VERSION)
# What the control plane's harness (tools/kube) looks for, as a PATH-like list.
KUBE_TOOLS          := $(KUBE_DIR):$(ETCD_DIR):$(KWOK_DIR):$(CRDS_DIR)
TOOLS_ENV           := HELM=$(HELM) PROMTOOL=$(PROMTOOL) YQ=$(YQ) KUBE_TOOLS=$(KUBE_TOOLS)

.PHONY: build test test-short race lint vet fuzz bench bench-quick demo clean tools

# The build's identity, linked into internal/version (kvcm-gc version, kvcm_gc_build_info).
# Without git (a source tarball) VERSION is "dev" and the revision is left to the build info.
VERSION    ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION   ?= $(shell git rev-parse HEAD 2>/dev/null)
BUILD_TIME ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
VERSION_PKG := github.com/kvcm-gc/kvcm-gc/internal/version
LDFLAGS    := -X $(VERSION_PKG).Version=$(VERSION) -X $(VERSION_PKG).Revision=$(REVISION) -X $(VERSION_PKG).BuildTime=$(BUILD_TIME)

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/ ./cmd/...

# The whole suite under the race detector: unit, integration and end-to-end tests against a
# real redis-server and embedded NATS JetStream, after go vet, staticcheck and the checks of
# the Helm chart and the alerting rules. The deploy tests render the chart and run promtool:
# REQUIRE_DEPLOY_TOOLS makes them fail, not skip, without the tools.
test: lint deploy-check
	$(TOOLS_ENV) REQUIRE_DEPLOY_TOOLS=1 $(GO) test -race -count=1 -timeout 30m $(PKGS)

# helm lint and helm template of the chart on its default values and on a values file that
# turns every part on, and promtool's check and unit tests of the alerting rules.
CHART        := deploy/helm/kvcm-gc
CHART_VALUES := $(CHART)/ci/full-values.yaml
.PHONY: deploy-check
deploy-check: tools
	$(HELM) lint --strict $(CHART)
	$(HELM) lint --strict $(CHART) -f $(CHART_VALUES)
	$(HELM) template kvcm-gc $(CHART) >/dev/null
	$(HELM) template kvcm-gc $(CHART) -f $(CHART_VALUES) >/dev/null
	$(PROMTOOL) check rules $(CHART)/files/alerts.yaml
	$(PROMTOOL) test rules deploy/prometheus/alerts_test.yaml

test-short:
	$(GO) test -count=1 -short $(PKGS)

vet:
	$(GO) vet $(PKGS)

lint: vet $(STATICCHECK)
	$(STATICCHECK) $(PKGS)

# Short, bounded fuzzing of every decoder of outside bytes.
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "fuzz $$pkg $$f"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

# The benchmark harness (tools/bench/): its own redis-server and NATS, seeded keyspaces in both
# block layouts (today's location layout, then the legacy one), and for each layout the raw
# Redis and file-system limits, each stage alone, end to end and serving latency (pinned:
# Redis and the load on one core, kvcm-gc and NATS on the other; and on shared cores), the
# scan rate against serving latency with the scanner's adaptive pacer on that curve (pinned),
# all against that layout's own baselines in one run; peak memory at two keyspace sizes for
# the location layout, and each stage's rate and memory on a metadata-only keyspace of
# SCALE_BLOCKS against a tenth of it. The report goes into BENCHMARKS.md. Not part of
# `make test`. The Go
# micro-benchmarks of the hot paths run with
# go test -run '^$$' -bench . -benchmem ./kvcm/ ./subjects/ ./pipeline/...
BLOCKS       ?= 1000000
SMALL_BLOCKS ?= 100000
SCALE_BLOCKS ?= 10000000
BENCH_FLAGS  ?=
bench:
	$(GO) build -o bin/bench/ ./tools/bench/cmd/kvcmbench ./tools/bench/cmd/kvcmstage
	bin/bench/kvcmbench -blocks $(BLOCKS) -small-blocks $(SMALL_BLOCKS) -scale-blocks $(SCALE_BLOCKS) -out BENCHMARKS.md -section full \
	  -command "make bench BLOCKS=$(BLOCKS) SMALL_BLOCKS=$(SMALL_BLOCKS) SCALE_BLOCKS=$(SCALE_BLOCKS) $(BENCH_FLAGS)" $(BENCH_FLAGS)

# A smaller run for development (about 10 minutes): same figures, 100k and 20k blocks, the
# memory comparison for both layouts, shorter serving windows, fewer points of the pace curve,
# 500k metadata-only blocks for the scale phase.
QUICK_BLOCKS       ?= 100000
QUICK_SMALL_BLOCKS ?= 20000
QUICK_SCALE_BLOCKS ?= 500000
bench-quick:
	$(GO) build -o bin/bench/ ./tools/bench/cmd/kvcmbench ./tools/bench/cmd/kvcmstage
	bin/bench/kvcmbench -blocks $(QUICK_BLOCKS) -small-blocks $(QUICK_SMALL_BLOCKS) -small-layout both -serving-window 2s -serving-reps 3 \
	  -pace-rates 4000,32000,0 -pace-small-batch-rates 32000 -pace-reps 1 -scale-blocks $(QUICK_SCALE_BLOCKS) -cost-keys 50000 \
	  -out BENCHMARKS.md -section quick \
	  -command "make bench-quick QUICK_BLOCKS=$(QUICK_BLOCKS) QUICK_SMALL_BLOCKS=$(QUICK_SMALL_BLOCKS) QUICK_SCALE_BLOCKS=$(QUICK_SCALE_BLOCKS) $(BENCH_FLAGS)" $(BENCH_FLAGS)

# The README's first command: installs redis-server if missing (apt-get, as root), then seeds
# a keyspace, collects one round with the all-in-one process and prints the verified report.
demo:
	bash scripts/ensure-redis.sh
	$(GO) run ./cmd/kvcm-gc demo

clean:
	rm -rf bin dist

# Static binaries of every command for each platform, with the build's identity linked in,
# into dist/<os>_<arch>/, and dist/SHA256SUMS over all of them (sha256sum -c checks them).
RELEASE_PLATFORMS ?= linux/amd64 linux/arm64
.PHONY: release
release:
	rm -rf dist
	@set -e; for p in $(RELEASE_PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; \
	  echo "build $$os/$$arch"; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" \
	    -o dist/$${os}_$${arch}/ ./cmd/...; \
	done
	cd dist && find . -type f ! -name SHA256SUMS | sort | sed 's|^\./||' | xargs sha256sum > SHA256SUMS
	@cat dist/SHA256SUMS

tools: $(STATICCHECK) $(HELM) $(PROMTOOL) $(YQ) $(KUBE_DIR)/kube-apiserver $(ETCD_DIR)/etcd $(KWOK_DIR)/kwok $(CRDS_DIR)/servicemonitors.monitoring.coreos.com.crd.yaml

# The environment the tests find the tools by, for a shell: eval "$$(make -s tools-env)".
.PHONY: tools-env
tools-env:
	@echo export $(TOOLS_ENV)

# A tool's directory appears whole or not at all: each is built into a temporary directory
# of the cache, then renamed. $(call publish,DIR) ends a recipe that built into $$tmp.
define publish
{ mv -T "$$tmp" $(1) 2>/dev/null || rm -rf "$$tmp"; }
endef
MKTMP = mkdir -p $(TC) && tmp=$$(mktemp -d $(TC)/.build-XXXXXX) && trap 'rm -rf "$$tmp"' EXIT

$(STATICCHECK):
	$(MKTMP) && GOBIN=$$tmp $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) && $(call publish,$(@D))

$(HELM):
	$(MKTMP) && GOBIN=$$tmp $(GO) install -ldflags='-s -w' helm.sh/helm/v4/cmd/helm@$(HELM_VERSION) && $(call publish,$(@D))

$(PROMTOOL):
	$(MKTMP) && GOBIN=$$tmp $(GO) install -tags remove_all_sd -ldflags='-s -w' github.com/prometheus/prometheus/cmd/promtool@$(PROMTOOL_VERSION) && $(call publish,$(@D))

$(YQ):
	$(MKTMP) && GOBIN=$$tmp $(GO) install -ldflags='-s -w' github.com/mikefarah/yq/v4@$(YQ_VERSION) && $(call publish,$(@D))

# The Kubernetes binaries report the version linked into component-base, v0.0.0 without it,
# which a chart's kubeVersion refuses.
KUBE_VERSION_PKG := k8s.io/component-base/version
KUBE_MAJOR       := $(patsubst v%,%,$(word 1,$(subst ., ,$(KUBE_VERSION))))
KUBE_MINOR       := $(word 2,$(subst ., ,$(KUBE_VERSION)))
KUBE_LDFLAGS     := -s -w -X $(KUBE_VERSION_PKG).gitVersion=$(KUBE_VERSION) -X $(KUBE_VERSION_PKG).gitMajor=$(KUBE_MAJOR) \
                    -X $(KUBE_VERSION_PKG).gitMinor=$(KUBE_MINOR) -X $(KUBE_VERSION_PKG).gitTreeState=clean
$(KUBE_DIR)/kube-apiserver:
	$(MKTMP) && cd $(KUBE_MOD) && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(KUBE_LDFLAGS)' -o "$$tmp/" \
	  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
	  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl && $(call publish,$(@D))

$(ETCD_DIR)/etcd:
	$(MKTMP) && cd $(KUBE_MOD) && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o "$$tmp/etcd" go.etcd.io/etcd/server/v3 \
	  && $(call publish,$(@D))

# kwok builds from its own module (its build list is not Kubernetes'); the stages it plays
# come from the same module: nodes become Ready and keep a lease, pods Running and Ready, a
# Job's pods complete, deleted pods go.
KWOK_STAGES := kustomize/stage/node/fast/node-initialize.yaml \
               kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
               kustomize/stage/pod/fast/pod-ready.yaml kustomize/stage/pod/fast/pod-complete.yaml \
               kustomize/stage/pod/fast/pod-delete.yaml
$(KWOK_DIR)/kwok:
	$(MKTMP) && GOBIN=$$tmp CGO_ENABLED=0 $(GO) install -trimpath -ldflags '-s -w' sigs.k8s.io/kwok/cmd/kwok@$(KWOK_VERSION) \
	  && dir=$$(cd $$tmp && $(GO) mod download -json sigs.k8s.io/kwok@$(KWOK_VERSION) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p') \
	  && for f in $(KWOK_STAGES); do cat "$$dir/$$f"; echo ---; done > "$$tmp/kwok-stages.yaml" \
	  && $(call publish,$(@D))

# The CRDs of the chart's ServiceMonitor and PrometheusRule, from prometheus-operator's module.
$(CRDS_DIR)/servicemonitors.monitoring.coreos.com.crd.yaml:
	$(MKTMP) && dir=$$(cd $$tmp && $(GO) mod download -json github.com/prometheus-operator/prometheus-operator@$(PROM_OPERATOR_VERSION) \
	  | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p') \
	  && for r in servicemonitors prometheusrules; do \
	    cp "$$dir/example/prometheus-operator-crd/monitoring.coreos.com_$$r.yaml" "$$tmp/$$r.monitoring.coreos.com.crd.yaml"; \
	  done && chmod 644 "$$tmp"/* && $(call publish,$(@D))

# The fault suite: the stage binaries as separate processes under kill -9, Redis and NATS
# restarts and outages, a scanner failover, a concurrent KVCM-like writer and clock skew,
# checked against DESIGN §8 after each scenario. Prints a table of scenarios and outcomes
# with its seed; FAULTS_FLAGS="-seed N" reproduces a run (-h lists the other flags).
.PHONY: faults
faults:
	$(GO) run ./tools/faults/cmd/faults $(FAULTS_FLAGS)

# The soak (tools/faults/cmd/soak): every stage, the sweep's too, as its own process for many rounds
# on a seeded keyspace of 200,000 blocks, while a KVCM-like workload writes, reads, deletes and
# crashes at a fixed rate, upstream's GC collects beside kvcm-gc and a fault hits every 3 rounds
# by a schedule that holds every kind (kill -9 of each stage, Redis and NATS restarts, on the
# JetStream cluster the loss of a node): each at least once, on the cluster twice. Every round is
# checked before the next one ends (nothing live lost, the garbage of round N gone by the end of
# N+1, nothing stranded DELETING, the backlog drained, nothing discarded from a stream before its
# consumer took it), and each stage's RSS, heap, goroutines and open files must grow by less than
# 1% of their mean a round over the last 60 rounds, by a fit with a 95% interval that must
# conclude. Two runs: the location layout on one server, the legacy layout on a 3-node cluster,
# each SOAK_DURATION long at least, and as long as its faults and its window need. Tables and
# plots go to bin/soak/. `make test` runs the short form.
SOAK_DURATION ?= 30m
SOAK_FLAGS    ?=
.PHONY: soak
soak:
	$(GO) run ./tools/faults/cmd/soak -duration $(SOAK_DURATION) -report bin/soak $(SOAK_FLAGS)
