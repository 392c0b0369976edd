#!/usr/bin/env bash
# tmux-up.sh: make sure tmux is installed: the send_keys and read_screen
# actions drive a tmux session on the host running forkline. Idempotent; CI
# runs it as root on a fresh Debian 12 machine (from .ci/run).
#
#   bash .ci/tmux-up.sh
set -euo pipefail

sudo_=()
if [ "$(id -u)" != 0 ]; then
	sudo_=(sudo)
fi
if ! command -v tmux >/dev/null 2>&1; then
	"${sudo_[@]}" apt-get update -qq
	"${sudo_[@]}" apt-get install -y -qq tmux >/dev/null
fi
tmux -V
