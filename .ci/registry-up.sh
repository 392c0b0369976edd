#!/usr/bin/env bash
# registry-up.sh: start two container registries on loopback for the tests
# that pull images (providers/docker, cmd/forkline): Debian's docker-registry
# package (the CNCF distribution registry, 2.8). Idempotent: an instance that
# already answers is left alone. CI runs it from .ci/run, as root, after
# docker-up.sh.
#
#   open      127.0.0.1:5710   no authentication
#   auth      127.0.0.1:5711   htpasswd: user forkline, password forkline-test-secret
#
# Both listen on 127.0.0.1 only and speak plain HTTP: the engine treats every
# registry in 127.0.0.0/8 as insecure by default (`docker info` lists
# "Insecure Registries: 127.0.0.0/8"), so it pulls from them without TLS.
# The credentials are a test fixture for a registry that only loopback can
# reach; they protect nothing.
#
# Addresses and credentials can be moved with FORKLINE_TEST_REGISTRY,
# FORKLINE_TEST_REGISTRY_AUTH, FORKLINE_TEST_REGISTRY_USER and
# FORKLINE_TEST_REGISTRY_PASSWORD; the tests read the same variables.
set -euo pipefail

OPEN=${FORKLINE_TEST_REGISTRY:-127.0.0.1:5710}
AUTH=${FORKLINE_TEST_REGISTRY_AUTH:-127.0.0.1:5711}
USER_=${FORKLINE_TEST_REGISTRY_USER:-forkline}
PASS=${FORKLINE_TEST_REGISTRY_PASSWORD:-forkline-test-secret}
STATE=${FORKLINE_REGISTRY_DIR:-/var/lib/forkline-registry}
WAIT_SECONDS=${REGISTRY_WAIT_SECONDS:-30}

sudo_=()
if [ "$(id -u)" != 0 ]; then
	sudo_=(sudo)
fi

missing=()
command -v docker-registry >/dev/null 2>&1 || missing+=(docker-registry)
command -v htpasswd >/dev/null 2>&1 || missing+=(apache2-utils)
command -v curl >/dev/null 2>&1 || missing+=(curl)
if [ "${#missing[@]}" -gt 0 ]; then
	echo "registry-up.sh: installing ${missing[*]}"
	"${sudo_[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	# Where an init system runs, the package also starts its own service on
	# :5000; the tests use only the two instances below.
	"${sudo_[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# answers ADDR: the registry's API root replies, with 200 (open) or 401
# (authentication required).
answers() {
	local code
	code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://$1/v2/" || true)
	[ "$code" = 200 ] || [ "$code" = 401 ]
}

start() { # NAME ADDR AUTH(yes|no)
	local name=$1 addr=$2 auth=$3 dir="$STATE/$1"
	if answers "$addr"; then
		echo "registry-up.sh: $name registry already answers on $addr"
		return
	fi
	"${sudo_[@]}" mkdir -p "$dir/data"
	{
		echo "version: 0.1"
		echo "log: {level: warn}"
		echo "storage:"
		echo "  filesystem: {rootdirectory: $dir/data}"
		echo "  delete: {enabled: true}"
		echo "http:"
		echo "  addr: $addr"
		echo "  secret: forkline-test-$name"
		if [ "$auth" = yes ]; then
			echo "auth:"
			echo "  htpasswd: {realm: forkline-test, path: $dir/htpasswd}"
		fi
	} | "${sudo_[@]}" tee "$dir/config.yml" >/dev/null
	if [ "$auth" = yes ]; then
		# bcrypt, the only hash the registry's htpasswd backend accepts.
		"${sudo_[@]}" htpasswd -Bbc "$dir/htpasswd" "$USER_" "$PASS" 2>/dev/null
	fi
	echo "registry-up.sh: starting the $name registry on $addr (log: $dir/registry.log)"
	"${sudo_[@]}" sh -c "nohup docker-registry serve '$dir/config.yml' >>'$dir/registry.log' 2>&1 &"
	for _ in $(seq 1 "$WAIT_SECONDS"); do
		answers "$addr" && return
		sleep 1
	done
	echo "registry-up.sh: the $name registry did not answer on $addr within ${WAIT_SECONDS}s; last lines of its log:" >&2
	tail -n 30 "$dir/registry.log" >&2 || true
	exit 1
}

start open "$OPEN" no
start auth "$AUTH" yes

# The engine must pull from these without TLS: check that it says so.
if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
	if ! docker info --format '{{range .RegistryConfig.InsecureRegistryCIDRs}}{{.}} {{end}}' | grep -q '127.0.0.0/8'; then
		echo "registry-up.sh: the engine does not treat 127.0.0.0/8 as insecure registries; pulls from $OPEN would need TLS" >&2
		exit 1
	fi
fi
echo "registry-up.sh: open $OPEN, htpasswd $AUTH (user $USER_)"
