#!/bin/bash
# The counter must be 42 (41 + 1: a write another episode made would show
# here), and audit must have seen 41 when it started after kv was healthy.
exec 3<>/dev/tcp/kv/7000; echo GET >&3; read -r n <&3; exec 3<&-
exec 3<>/dev/tcp/audit/7001; read -r seen <&3; exec 3<&-
echo "counter=$n audit=$seen"
if [ "$n" = 42 ] && [ "$seen" = 41 ]; then
	echo 1 > /logs/verifier/reward.txt
else
	echo 0 > /logs/verifier/reward.txt
fi
