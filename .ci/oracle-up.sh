#!/usr/bin/env bash
# oracle-up.sh: install the test oracle's pinned third-party components (the
# real chat templates and tokenizers, and the two Jinja implementations that
# render them; see internal/oracle/README.md). Idempotent and quiet; CI runs it
# as root on a fresh Debian 12 machine (from .ci/run), a developer as often as
# they like.
#
#   bash .ci/oracle-up.sh
#
# - Debian's python3-jinja2 for /usr/bin/python3, with apt, only when
#   `/usr/bin/python3 -c 'import jinja2'` fails;
# - `npm ci` in internal/oracle/js (the versions in its package-lock.json),
#   only when node_modules does not already match the lockfile.
# Tests that need these skip with the reason unless FORKLINE_REQUIRE names
# "templates", which turns the skip into a failure.
set -euo pipefail
cd "$(dirname "$0")/.."

sudo_=()
if [ "$(id -u)" != 0 ]; then
	sudo_=(sudo)
fi

if /usr/bin/python3 -c 'import jinja2' 2>/dev/null; then
	echo "oracle-up.sh: python3-jinja2 is installed"
else
	echo "oracle-up.sh: installing python3-jinja2"
	# apt's progress and debconf chatter are shown only when it fails.
	if ! log=$("${sudo_[@]}" env DEBIAN_FRONTEND=noninteractive sh -c 'apt-get update -qq && apt-get install -y -qq python3-jinja2' 2>&1); then
		echo "$log" >&2
		exit 1
	fi
fi
/usr/bin/python3 -c 'import jinja2, sys; print("oracle-up.sh: jinja2", jinja2.__version__, "on python", sys.version.split()[0])'

command -v node >/dev/null || { echo "oracle-up.sh: node is not installed (Node.js 20 is needed)" >&2; exit 1; }
js=internal/oracle/js
# npm ci deletes and reinstalls node_modules every time (about 150 MB to
# fetch); skip it when what is installed is exactly what the lockfile says.
# npm writes node_modules/.package-lock.json on install: when it equals the
# lockfile's package entries, the tree is current.
if [ -f "$js/node_modules/.package-lock.json" ] && node -e '
	const fs = require("fs");
	const want = JSON.parse(fs.readFileSync(process.argv[1] + "/package-lock.json", "utf8")).packages;
	const have = JSON.parse(fs.readFileSync(process.argv[1] + "/node_modules/.package-lock.json", "utf8")).packages;
	for (const [k, v] of Object.entries(want)) {
		if (k === "") continue;
		if (!have[k] || have[k].version !== v.version || have[k].integrity !== v.integrity) process.exit(1);
	}
	if (Object.keys(have).length !== Object.keys(want).length - 1) process.exit(1);
' "$js"; then
	echo "oracle-up.sh: $js/node_modules matches the lockfile"
else
	echo "oracle-up.sh: npm ci in $js"
	if ! log=$(cd "$js" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error 2>&1); then
		echo "$log" >&2
		exit 1
	fi
fi
node -e 'console.log("oracle-up.sh: node", process.version)'
