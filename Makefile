# kvcm-gc build, test and demo targets. Every target that needs servers starts its own.
GO       ?= go
PKGS     := ./...
FUZZTIME ?= 10s
STATICCHECK_VERSION ?= 2025.1.1

.PHONY: build test test-short race lint vet fuzz bench demo clean tools

build:
	$(GO) build -o bin/ ./cmd/...

# The whole suite under the race detector: unit, integration and end-to-end tests against a
# real redis-server and embedded NATS JetStream.
test:
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 -timeout 15m $(PKGS)

test-short:
	$(GO) test -count=1 -short $(PKGS)

vet:
	$(GO) vet $(PKGS)

lint: vet
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)

# Short, bounded fuzzing of every decoder of outside bytes.
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "fuzz $$pkg $$f"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./kvcm/ ./subjects/ ./pipeline/

demo:
	$(GO) run ./cmd/kvcm-gc demo

clean:
	rm -rf bin
