#!/bin/bash
# The counter must be 42 (the seed's 41 + 1: a write another episode made
# would show here), and kv must be the version its build argument gave.
ask() { exec 3<>/dev/tcp/kv/7000; echo "$1" >&3; read -r a <&3; exec 3<&-; echo "$a"; }
n=$(ask GET)
v=$(ask VERSION)
echo "counter=$n version=$v"
if [ "$n" = 42 ] && [ "$v" = v7 ]; then
	echo 1 > /logs/verifier/reward.txt
else
	echo 0 > /logs/verifier/reward.txt
fi
