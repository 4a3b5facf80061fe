#!/usr/bin/env bash
# The README's run command: installs what Airlock needs, starts it on its embedded defaults (in the
# background, logging to $AIRLOCK_DATA_DIR/airlock.log), and runs a real sandbox task.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
DATA_DIR=${AIRLOCK_DATA_DIR:-/var/lib/airlock}
URL=${AIRLOCK_URL:-http://127.0.0.1:7070}

"$here/scripts/install.sh"

if ! curl -fsS "$URL/v1/health" >/dev/null 2>&1; then
  mkdir -p "$DATA_DIR" && chmod 700 "$DATA_DIR"
  echo "==> starting airlock up (log: $DATA_DIR/airlock.log)"
  nohup airlock up --data-dir "$DATA_DIR" >>"$DATA_DIR/airlock.log" 2>&1 &
  # The first start installs the default template's image (a few seconds) before it listens.
  for _ in $(seq 1 600); do
    curl -fsS "$URL/v1/health" >/dev/null 2>&1 && break
    sleep 0.2
  done
  curl -fsS "$URL/v1/health" >/dev/null || { echo "airlock did not start; see $DATA_DIR/airlock.log" >&2; tail -20 "$DATA_DIR/airlock.log" >&2; exit 1; }
fi

echo "==> creating a sandbox and running python3 in it"
id=$(airlock --data-dir "$DATA_DIR" sandbox create)
echo "sandbox: $id"
airlock --data-dir "$DATA_DIR" exec "$id" -- python3 -c 'print(6*7)'
airlock --data-dir "$DATA_DIR" sandbox rm "$id"
cat <<MSG

Airlock is running at $URL. Your API key is in ~/.config/airlock/api-key (the CLI reads it).
Try:  airlock sandbox create     then   airlock exec <id> -- bash -c 'uname -a; id'
Stop: kill \$(pgrep -f 'airlock up')   (SIGTERM stops every sandbox cleanly)
MSG
