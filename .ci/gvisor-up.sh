#!/usr/bin/env bash
# gvisor-up.sh: make sure gVisor's runsc (Debian's runsc package) is
# installed and really runs a sandbox on this machine. Idempotent; CI runs it
# as root on a fresh Debian 12 machine (from .ci/run, before docker-up.sh, so
# that a dockerd it starts gets the runsc runtime), and a developer can run it
# as often as they like.
#
# Steps:
#   1. install runsc and busybox-static with apt, only when missing;
#   2. print runsc's version;
#   3. run one sandbox (a busybox root filesystem, network none, the overlay
#      forkline uses) that prints a line, and fail loudly when it does not:
#      a kernel or platform runsc cannot use shows here, not in the tests.
set -euo pipefail

sudo_=()
if [ "$(id -u)" != 0 ]; then
	sudo_=(sudo)
fi

missing=()
command -v runsc >/dev/null 2>&1 || [ -x /usr/sbin/runsc ] || [ -x /usr/bin/runsc ] || missing+=(runsc)
[ -x /bin/busybox ] || missing+=(busybox-static)
if [ "${#missing[@]}" -gt 0 ]; then
	echo "gvisor-up.sh: installing ${missing[*]}"
	"${sudo_[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	"${sudo_[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
runsc=$(command -v runsc || echo /usr/bin/runsc)
echo "gvisor-up.sh: $("$runsc" --version | head -1) at $runsc"

tmp=$(mktemp -d /tmp/forkline-gvisor-smoke.XXXXXX)
trap '"${sudo_[@]}" "$runsc" --root="$tmp/state" delete --force "smoke-$$" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bundle/rootfs/bin" "$tmp/bundle/rootfs/proc" "$tmp/bundle/rootfs/dev" "$tmp/bundle/rootfs/sys" "$tmp/bundle/rootfs/tmp"
cp /bin/busybox "$tmp/bundle/rootfs/bin/busybox"
ln -s busybox "$tmp/bundle/rootfs/bin/sh"
ln -s busybox "$tmp/bundle/rootfs/bin/echo"
(cd "$tmp/bundle" && "$runsc" spec -- /bin/sh -c 'echo gvisor-smoke-ok' && sed -i 's/"terminal": true/"terminal": false/' config.json)
out=$(cd "$tmp/bundle" && timeout 120 "${sudo_[@]}" "$runsc" --root="$tmp/state" --network=none --overlay2=root:memory run "smoke-$$" </dev/null 2>&1) || true
if ! printf '%s' "$out" | grep -q gvisor-smoke-ok; then
	echo "gvisor-up.sh: runsc could not run a sandbox here: $out" >&2
	exit 1
fi
echo "gvisor-up.sh: a sandbox ran (platform ptrace, network none)"
