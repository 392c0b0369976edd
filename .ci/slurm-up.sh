#!/usr/bin/env bash
# slurm-up.sh: make sure Debian's Slurm (slurm-wlm: slurmctld, slurmd and
# the client commands) and munge are installed for the tests that run the
# README's Slurm array script on a real cluster. Idempotent; CI runs it as
# root on a fresh Debian 12 machine (from .ci/run), and a developer can run
# it as often as they like.
#
#   bash .ci/slurm-up.sh
#
# It only installs: it starts no daemon and writes no configuration. Each
# test starts its own one-node cluster on 127.0.0.1 (internal/slurmtest: a
# private munged, slurmctld and slurmd, with a slurm.conf, ports, state and
# spool directories of its own in the test's temporary directory) and
# stops it at the end, so tests never share a cluster with each other or
# with a Slurm the machine may already run. The Slurm tests skip without
# these commands unless FORKLINE_REQUIRE names slurm, which turns the skip
# into a failure.
set -euo pipefail

sudo_=()
if [ "$(id -u)" != 0 ]; then
	sudo_=(sudo)
fi

need=()
for c in sbatch scontrol squeue scancel sinfo /usr/sbin/slurmctld /usr/sbin/slurmd /usr/sbin/munged mungekey; do
	command -v "$c" >/dev/null 2>&1 || need+=("$c")
done
if [ ${#need[@]} -eq 0 ]; then
	echo "slurm-up.sh: slurm-wlm and munge are installed"
else
	echo "slurm-up.sh: installing slurm-wlm and munge (missing: ${need[*]})"
	"${sudo_[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	"${sudo_[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
fi
# (The tests' munged makes a key of its own with mungekey; the package's
# /etc/munge/munge.key is left alone.)
dpkg-query -W -f='${Package} ${Version}\n' slurm-wlm slurmctld slurmd munge
