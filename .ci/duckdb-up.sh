#!/usr/bin/env bash
# duckdb-up.sh: build the DuckDB query oracle the tests compare forkline
# view's episode filters with (internal/oracle/duckdb, a module of its own:
# cgo DuckDB). Idempotent: it installs a C compiler with apt when there is
# none, then builds the program, which downloads DuckDB's static library
# through the Go module proxy the first time; internal/testenv keeps the
# built program in the user's cache directory under the hash of its
# sources, so the tests do not link it again.
#
#   bash .ci/duckdb-up.sh
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v gcc >/dev/null 2>&1; then
	sudo_=()
	if [ "$(id -u)" != 0 ]; then
		sudo_=(sudo)
	fi
	"${sudo_[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	"${sudo_[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc g++ >/dev/null
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
(cd internal/oracle/duckdb && go build -o "$out/duckdb" .)
"$out/duckdb" -sql "SELECT 42 AS answer"
