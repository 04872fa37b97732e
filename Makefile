# likes: the two commands a newcomer needs are `make run` and `make test`.
GO ?= go
STATICCHECK = honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: run test lint unit bench tools gen test-rules

## run: start regions us, eu, ap on the embedded default (Pebble + embedded etcd, no servers) on 127.0.0.1:8080-8082
run:
	$(GO) run ./cmd/likesd dev

## test: everything CI runs: formatting, vet, staticcheck, every test with -race, then the
## contract suites against real etcd, Redis, Kafka and Cassandra (installed and started by
## scripts/servers.sh, stopped after)
test: tools lint test-rules unit test-engines

## tools: install protoc (Debian's protobuf-compiler) and chromium (the operator console's
## browser test) when missing; protoc-gen-go is pinned in go.mod
tools:
	@command -v protoc >/dev/null || { \
	  echo "installing protoc (protobuf-compiler)"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq protobuf-compiler >/dev/null; }
	@command -v chromium >/dev/null || { \
	  echo "installing chromium (the console test's headless browser)"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; }

## test-rules: check the Prometheus rules and run their unit tests (promtool from Debian's
## package prometheus, installed when missing; its server is not started)
test-rules:
	@command -v promtool >/dev/null || { \
	  echo "installing promtool (prometheus)"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }
	promtool check rules monitoring/alerts.yaml
	cd monitoring && promtool test rules alerts_test.yaml

## gen: regenerate internal/peerpb from peer.proto (internal/peerpb's test fails when it is stale)
gen: tools
	$(GO) build -o .bin/protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go
	cd internal/peerpb && protoc --plugin=protoc-gen-go=../../.bin/protoc-gen-go --go_out=. --go_opt=paths=source_relative peer.proto

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

unit:
	$(GO) test -race -count=1 -timeout 20m ./...
	@# every benchmark once, so a benchmark that no longer runs fails here
	$(GO) test -run '^$$' -bench . -benchtime 1x -count=1 -timeout 10m ./...

## bench: the load tool against likesd, with redis-benchmark as the same-run reference
bench:
	bash scripts/bench.sh

# --- production engines (DESIGN.md §7) ----------------------------------------
.PHONY: servers servers-down test-engines
ENGINES ?= etcd redis kafka cassandra
ENGINE_PKGS ?= ./store/... ./stream/... ./epoch/... ./cache/...
# the end-to-end tests: one region on Cassandra + Kafka + Redis, and clusters mixing embedded and Cassandra regions
ENGINE_E2E ?= -run '^(TestEngines|TestMixedEngines)' ./region
# the chaos suite with every region on the engines (a short schedule)
ENGINE_CHAOS ?= -run '^TestEnginesChaos$$' ./chaos

## servers: install what is missing and start etcd, Redis, Kafka and Cassandra on loopback
servers:
	bash scripts/servers.sh up $(ENGINES)

## servers-down: stop the servers `make servers` started
servers-down:
	bash scripts/servers.sh down

## test-engines: the contract suites against the real engines, then one region end to end on
## Cassandra + Kafka + Redis (starts the servers, stops them after; KEEP_SERVERS=1 leaves them up)
test-engines:
	bash scripts/servers.sh up $(ENGINES)
	@rc=0; eval "$$(bash scripts/servers.sh env)"; \
	  env | grep '^LIKES_TEST_' | sort; \
	  $(GO) test -race -count=1 -timeout 20m $(ENGINE_PKGS) || rc=$$?; \
	  $(GO) test -race -count=1 -timeout 15m $(ENGINE_E2E) || rc=$$?; \
	  $(GO) test -race -count=1 -timeout 10m $(ENGINE_CHAOS) || rc=$$?; \
	  if [ -z "$(KEEP_SERVERS)" ]; then bash scripts/servers.sh down || true; fi; \
	  exit $$rc
