#!/bin/bash
# Three checks; the reward is the share that passed, and each check is a
# metric of its own in reward.json.
want=(3 9 44)
mapfile -t got < /app/stats.txt
names=(lines_ok words_ok chars_ok)
passed=0
metrics=""
for i in 0 1 2; do
	ok=0
	if [ "${got[$i]}" = "${want[$i]}" ]; then ok=1; passed=$((passed + 1)); fi
	metrics="$metrics, \"${names[$i]}\": $ok"
done
printf '{"reward": %s%s}\n' "$(awk -v p=$passed 'BEGIN { printf "%.4f", p / 3 }')" "$metrics" > /logs/verifier/reward.json
