#!/usr/bin/env bash
# chromium-up.sh: make sure Chromium is installed for the browser tests and
# the web tasks. Idempotent; CI runs it as root on a fresh Debian 12 machine
# (from .ci/run), and a developer can run it as often as they like.
#
#   bash .ci/chromium-up.sh
#
# It installs Debian's chromium package with apt only when /usr/bin/chromium
# (or $FORKLINE_CHROMIUM, when set) is missing, then prints the version. The
# browser tests skip without Chromium unless FORKLINE_REQUIRE names
# chromium, which turns the skip into a failure.
set -euo pipefail

exe=${FORKLINE_CHROMIUM:-/usr/bin/chromium}

sudo_=()
if [ "$(id -u)" != 0 ]; then
	sudo_=(sudo)
fi

if [ -x "$exe" ]; then
	echo "chromium-up.sh: $exe is installed"
elif [ -n "${FORKLINE_CHROMIUM:-}" ]; then
	echo "chromium-up.sh: FORKLINE_CHROMIUM=$FORKLINE_CHROMIUM is not an executable; not installing anything" >&2
	exit 1
else
	echo "chromium-up.sh: installing chromium (a large package; a minute or two)"
	"${sudo_[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	"${sudo_[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-liberation >/dev/null
fi
# --version needs no display, no profile and no network. (Debian's launcher
# script may print a harmless "[: ... unexpected operator" line first.)
"$exe" --version
