#!/bin/bash
if [ -e /tests ]; then echo "saw /tests"; else echo "no /tests"; fi
# Two thirds right on purpose: the characters are counted without the last
# newline, so the third number is one short.
{ wc -l < /app/data/notes.txt; wc -w < /app/data/notes.txt; echo $(( $(wc -c < /app/data/notes.txt) - 1 )); } > /app/stats.txt
