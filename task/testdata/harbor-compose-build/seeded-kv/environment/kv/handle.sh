read -r op arg
case "$op" in
GET) cat /data/counter ;;
SET) echo "$arg" > /data/counter.tmp && mv /data/counter.tmp /data/counter && echo OK ;;
VERSION) cat /kv/version ;;
*) echo ERR ;;
esac
