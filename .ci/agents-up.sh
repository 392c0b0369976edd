#!/usr/bin/env bash
# agents-up.sh: install the agent harnesses -policy agent runs (Claude Code,
# Codex, opencode) from npm, at the versions forkline pins with lockfiles
# (harness/npm/*/package-lock.json), into forkline's harness cache
# ($FORKLINE_AGENTS_DIR, else ~/.cache/forkline/agents). Idempotent: an
# install already in the cache (its directory is named after the
# lockfile's content) is kept. Needs Go and npm (Node.js); CI runs it as
# root on a fresh Debian 12 machine (from .ci/run).
#
#   bash .ci/agents-up.sh
#
# Tests that run a harness skip with the reason unless FORKLINE_REQUIRE
# names "agents", which turns the skip into a failure.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v npm >/dev/null 2>&1; then
	echo "agents-up.sh: installing npm"
	if ! log=$(env DEBIAN_FRONTEND=noninteractive sh -c 'apt-get update -qq && apt-get install -y -qq npm' 2>&1); then
		echo "$log" >&2
		exit 1
	fi
fi
go run ./cmd/forkline images -agent claude-code,codex,opencode
