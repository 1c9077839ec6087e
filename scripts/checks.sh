# Sourced by the scripts that check their knobs before any work: one error line and exit 2.
#   fail MESSAGE...      prints "error: <script>.sh: MESSAGE" and exits 2
#   is_int VALUE         a positive integer
#   is_positive VALUE    a number > 0 (1e-4, 0.5, 3)
#   check_bert_dir KNOB DIR  fails unless DIR is laid out like a Google release
fail() { echo "error: $(basename "$0"): $*" >&2; exit 2; }
is_int() { [[ "$1" =~ ^[1-9][0-9]*$ ]]; }
is_positive() { python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) > 0 else 1)" "$1" 2> /dev/null; }
check_bert_dir() {
  local file
  for file in vocab.txt bert_config.json bert_model.ckpt.index; do
    [ -f "$2/$file" ] || fail "$1=$2: no $file there (expected a folder laid out like a Google release)"
  done
}
