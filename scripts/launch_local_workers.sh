#!/usr/bin/env bash
# Starts N training processes of one run on this machine, on free localhost ports, as N hosts
# would run them: process i gets --worker_hosts=<all N> --task_index=i; task 0 is the chief.
# Each process's log lines are prefixed with [task i]. Ctrl-C or SIGTERM is passed to every
# process (the chief saves a checkpoint); the exit status is the first non-zero one.
#
#   bash scripts/launch_local_workers.sh 2 run_classifier_mgpu.py --task_name=tsv ... --n_gpus=1
#
# GPUs: every process sees CUDA_VISIBLE_DEVICES, and when it lists N x --n_gpus cards or more,
# process i takes the i-th block of --n_gpus of them (tower_utils.process_gpus). Or give each
# process its own list with CUDA_VISIBLE_DEVICES_<i> (e.g. CUDA_VISIBLE_DEVICES_0=0,1
# CUDA_VISIBLE_DEVICES_1=2,3). Two processes that would share a card stop at the handshake
# with one error line naming it.
# Prints the processes' logs; takes as long as the run (the README's two-process example on the
# demo's data: about a minute on 2 cores).
source "$(dirname "$0")/help.sh" "$@"
set -uo pipefail
if [ "$#" -lt 2 ] || ! [[ "$1" =~ ^[1-9][0-9]*$ ]]; then
  echo "error: usage: bash scripts/launch_local_workers.sh N run_script.py [flags...] (N >= 1)" >&2
  exit 2
fi
N="$1"; SCRIPT="$2"; shift 2
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -z "${VIRTUAL_ENV:-}" ] && [ -x "$REPO_ROOT/.venv/bin/python" ]; then
  PYTHON="$REPO_ROOT/.venv/bin/python"
else
  PYTHON="${PYTHON:-python3}"
fi
case "$SCRIPT" in /*) ;; *) [ -f "$SCRIPT" ] || SCRIPT="$REPO_ROOT/$SCRIPT" ;; esac
if [ ! -f "$SCRIPT" ]; then
  echo "error: $SCRIPT: no such run script" >&2
  exit 2
fi
export PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"

PORTS="$("$PYTHON" - "$N" <<'EOF'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
  s.bind(("localhost", 0))
print(",".join("localhost:%d" % s.getsockname()[1] for s in socks))
EOF
)"
echo "[launch] $N processes on $PORTS: $(basename "$SCRIPT") $*" >&2

PIDS=()
stop_all() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
}
trap 'stop_all' INT TERM

for ((i = 0; i < N; i++)); do
  devices_var="CUDA_VISIBLE_DEVICES_$i"
  (
    if [ -n "${!devices_var:-}" ]; then export CUDA_VISIBLE_DEVICES="${!devices_var}"; fi
    exec "$PYTHON" "$SCRIPT" "$@" --worker_hosts="$PORTS" --task_index="$i" \
      > >(sed -u "s/^/[task $i] /") 2> >(sed -u "s/^/[task $i] /" >&2)
  ) &
  PIDS+=("$!")
done

STATUS=0
for pid in "${PIDS[@]}"; do
  wait "$pid"
  code=$?
  # A trapped signal interrupts `wait`; wait again for the process itself.
  while kill -0 "$pid" 2>/dev/null; do wait "$pid"; code=$?; done
  if [ "$STATUS" -eq 0 ] && [ "$code" -ne 0 ]; then STATUS=$code; fi
done
exit "$STATUS"
