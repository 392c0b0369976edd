#!/bin/bash
# Harbor's verifier contract: write the reward to /logs/verifier/reward.txt.
out=$(/app/greet.sh Ada)
if [ "$out" = "Hello, Ada!" ]; then
	echo 1 > /logs/verifier/reward.txt
else
	echo "greet.sh Ada printed: $out"
	echo 0 > /logs/verifier/reward.txt
fi
