.DEFAULT_GOAL := help
GOLANGCI := go run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

test: ## go test ./... (server tests skip without SURELY_*_URL)
	go test ./...

test-services: ## the full suite against local servers, as CI runs it
	SURELY_REQUIRE_SERVICES=1 SURELY_REDIS_URL=redis://127.0.0.1:6379 \
	SURELY_POSTGRES_URL='postgres://postgres@127.0.0.1:5432/test?sslmode=disable' \
	SURELY_MYSQL_URL='root@tcp(127.0.0.1:3306)/test' SURELY_NATS_URL=nats://127.0.0.1:4222 \
	SURELY_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/ go test -race ./...

bench: ## router benchmarks with allocations
	go test -run '^$$' -bench BenchmarkRouter -benchmem ./bench/

lint: ## gofmt, go vet and golangci-lint
	test -z "$$(gofmt -l .)"
	go vet ./...
	$(GOLANGCI) run ./...

mutation: ## gremlins mutation testing, efficacy per package (docs/MUTATION.md)
	scripts/mutation.sh

ci: ## what CI runs
	bash .ci/run
