# Sourced first by every user script, with the script's arguments: `--help` or `-h` as the first
# one prints the script's opening comment (what it runs, its arguments and environment
# variables, what it prints, about how long) and exits 0, before any set-up.
#   source "$(dirname "$0")/help.sh" "$@"
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  awk 'NR == 1 && /^#!/ { next } !/^#/ { exit } { sub(/^# ?/, ""); print }' "$0"
  exit 0
fi
