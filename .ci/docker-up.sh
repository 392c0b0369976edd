#!/usr/bin/env bash
# docker-up.sh: make sure a Docker engine answers on this machine and that
# forkline's base images exist. Idempotent; CI runs it as root on a fresh
# Debian 12 machine (from .ci/run), and a developer can run it as often as
# they like.
#
#   bash .ci/docker-up.sh            # engine + forkline/busybox
#   bash .ci/docker-up.sh -debian    # also forkline/debian (debootstrap, slow)
#
# Steps:
#   1. install docker.io and busybox-static with apt, only when missing;
#   2. start dockerd (bridge and iptables off: sandboxes use network none, and
#      nothing here may route to private addresses) only when no engine
#      answers, logging to $DOCKERD_LOG; when gVisor's runsc is installed
#      (.ci/gvisor-up.sh runs first), register it first as the runtime
#      "runsc" in /etc/docker/daemon.json, added to what the file already
#      holds (a runsc entry already there is left as it is), with
#      --network=none (runsc cannot take the engine's network namespace
#      here, and forkline's sandboxes have no network) and
#      --file-access=shared (the engine copies files into a running
#      container for file actions; runsc's default exclusive access would
#      not see them): -provider docker -provider-opt runtime=runsc;
#   3. wait (bounded) until `docker version` answers, print the engine version;
#   4. build the images with forkline's image builder (go run ./cmd/forkline images).
set -euo pipefail

cd "$(dirname "$0")/.."

DOCKERD_LOG=${DOCKERD_LOG:-/var/log/forkline-dockerd.log}
WAIT_SECONDS=${DOCKER_WAIT_SECONDS:-60}
images=forkline/busybox
debian=
for a in "$@"; do
	case "$a" in
	-debian | --debian) images=forkline/busybox,forkline/debian; debian=1 ;;
	*) echo "docker-up.sh: unknown argument $a (known: -debian)" >&2; exit 2 ;;
	esac
done

sudo_=()
if [ "$(id -u)" != 0 ]; then
	sudo_=(sudo)
fi

# register_runsc adds the runtime "runsc" to /etc/docker/daemon.json when
# runsc is installed and the file has no runsc entry yet; every other setting
# in the file is kept.
register_runsc() {
	local runsc conf=/etc/docker/daemon.json
	runsc=$(command -v runsc 2>/dev/null || true)
	[ -n "$runsc" ] || return 0
	if [ -f "$conf" ] && grep -q '"runsc"' "$conf"; then
		echo "docker-up.sh: $conf already registers a runsc runtime; left as it is"
		return 0
	fi
	"${sudo_[@]}" mkdir -p /etc/docker
	if [ ! -s "$conf" ]; then
		printf '{"runtimes": {"runsc": {"path": "%s", "runtimeArgs": ["--network=none", "--file-access=shared"]}}}\n' "$runsc" | "${sudo_[@]}" tee "$conf" >/dev/null
	else
		command -v python3 >/dev/null 2>&1 || "${sudo_[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-minimal >/dev/null
		"${sudo_[@]}" python3 - "$conf" "$runsc" <<'PY'
import json, sys
path, runsc = sys.argv[1], sys.argv[2]
with open(path) as f:
    conf = json.load(f)
conf.setdefault("runtimes", {})["runsc"] = {"path": runsc, "runtimeArgs": ["--network=none", "--file-access=shared"]}
with open(path + ".forkline-tmp", "w") as f:
    json.dump(conf, f, indent=2)
    f.write("\n")
import os
os.replace(path + ".forkline-tmp", path)
PY
	fi
	echo "docker-up.sh: registered runsc ($runsc) as a runtime in $conf"
}

engine_answers() {
	docker version --format '{{.Server.Version}}' >/dev/null 2>&1
}

missing=()
if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
	missing+=(docker.io)
fi
[ -x /bin/busybox ] || missing+=(busybox-static)
if [ -n "$debian" ] && ! command -v debootstrap >/dev/null 2>&1 && [ ! -x /usr/sbin/debootstrap ]; then
	missing+=(debootstrap)
fi
if [ "${#missing[@]}" -gt 0 ]; then
	echo "docker-up.sh: installing ${missing[*]}"
	"${sudo_[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	"${sudo_[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if engine_answers; then
	echo "docker-up.sh: an engine already answers"
else
	# A host-wide DOCKER_HOST pointing elsewhere would make us start a local
	# daemon that nobody talks to; only start one for the default socket.
	if [ -n "${DOCKER_HOST:-}" ] && [ "${DOCKER_HOST}" != "unix:///var/run/docker.sock" ]; then
		echo "docker-up.sh: DOCKER_HOST=$DOCKER_HOST does not answer and is not the local default socket; not starting dockerd" >&2
		exit 1
	fi
	register_runsc
	echo "docker-up.sh: starting dockerd (log: $DOCKERD_LOG)"
	"${sudo_[@]}" sh -c "nohup dockerd --bridge=none --iptables=false >>'$DOCKERD_LOG' 2>&1 &"
	for _ in $(seq 1 "$WAIT_SECONDS"); do
		engine_answers && break
		sleep 1
	done
	if ! engine_answers; then
		echo "docker-up.sh: dockerd did not answer within ${WAIT_SECONDS}s; last lines of $DOCKERD_LOG:" >&2
		tail -n 30 "$DOCKERD_LOG" >&2 || true
		exit 1
	fi
fi
docker version --format 'docker-up.sh: engine {{.Server.Version}} (API {{.Server.APIVersion}}), client {{.Client.Version}}'
if command -v runsc >/dev/null 2>&1 && ! docker info --format '{{json .Runtimes}}' | grep -q '"runsc"'; then
	echo "docker-up.sh: note: the running engine has no runsc runtime (it was started before runsc was registered); -provider-opt runtime=runsc needs it registered and the engine restarted"
fi

go run ./cmd/forkline images -image "$images"
