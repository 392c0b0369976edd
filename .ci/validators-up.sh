#!/usr/bin/env bash
# validators-up.sh: install the third-party validators format tests check
# exports with: Debian's python3-jsonschema (ATIF trajectories against the
# schema written from Harbor's RFC) and python3-yaml (a Hugging Face dataset
# card's front matter), for /usr/bin/python3. Idempotent and quiet; CI runs
# it from .ci/run. Tests that need them skip with the reason unless
# FORKLINE_REQUIRE names "validators".
set -euo pipefail

sudo_=()
if [ "$(id -u)" != 0 ]; then
	sudo_=(sudo)
fi

if /usr/bin/python3 -c 'import jsonschema, yaml' 2>/dev/null; then
	echo "validators-up.sh: python3-jsonschema and python3-yaml are installed"
	exit 0
fi
echo "validators-up.sh: installing python3-jsonschema python3-yaml"
if ! log=$("${sudo_[@]}" env DEBIAN_FRONTEND=noninteractive sh -c 'apt-get update -qq && apt-get install -y -qq python3-jsonschema python3-yaml' 2>&1); then
	echo "$log" >&2
	exit 1
fi
/usr/bin/python3 -c 'import jsonschema, yaml'
