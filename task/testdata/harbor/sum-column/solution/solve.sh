#!/bin/bash
if [ -e /tests ]; then echo "saw /tests"; else echo "no /tests"; fi
awk -F, 'NR > 1 { s += $2 } END { print s }' /app/data/sales.csv > /app/total.txt
