# likes: the two commands a newcomer needs are `make run` and `make test`.
GO ?= go
STATICCHECK = honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: run test lint unit bench

## run: start one region on the embedded default (Pebble, no servers) on 127.0.0.1:8080
run:
	$(GO) run ./cmd/likesd dev

## test: everything CI runs: formatting, vet, staticcheck, and every test with -race
test: lint unit

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

unit:
	$(GO) test -race -count=1 -timeout 20m ./...

## bench: the load tool against likesd, with redis-benchmark as the same-run reference
bench:
	bash scripts/bench.sh
