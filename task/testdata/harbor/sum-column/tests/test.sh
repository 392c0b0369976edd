#!/bin/bash
# The expected total is a fixture beside this script: the agent never saw it.
if [ "$(tr -d ' \n' < /app/total.txt)" = "$(tr -d ' \n' < /tests/expected_total.txt)" ]; then
	echo 1 > /logs/verifier/reward.txt
else
	echo 0 > /logs/verifier/reward.txt
fi
