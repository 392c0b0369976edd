#!/bin/bash
if [ -e /tests ]; then echo "saw /tests"; else echo "no /tests"; fi
cat > /app/greet.sh <<'SCRIPT'
#!/bin/sh
echo "Hello, $1!"
SCRIPT
