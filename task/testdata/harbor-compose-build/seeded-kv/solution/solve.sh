#!/bin/bash
# Read the counter from kv and store it plus one (bash's /dev/tcp: the
# image has no HTTP client, and needs none).
set -euo pipefail
ask() {
	exec 3<>"/dev/tcp/kv/$KV_PORT"
	echo "$1" >&3
	read -r answer <&3
	exec 3<&-
	echo "$answer"
}
n=$(ask GET)
ok=$(ask "SET $((n + 1))")
echo "counter $n -> $((n + 1)): $ok"
