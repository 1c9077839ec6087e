#!/usr/bin/env bash
# Benchmarks create_pretraining_data.py against the stock algorithm (speed and peak memory).
#
#   bash scripts/benchmark_pretraining_data.sh [corpus.txt] [extra benchmark flags...]
# Default corpus: /work/shared/data/corpus/legal_zh.txt if it exists, else a generated one
# (about 600 KB). The flags go to benchmarks/pretraining_data_bench.py (its --help lists them).
# Prints the data-tool table (documents/sec and peak memory: ours with 1 and 2 workers, the stock
# algorithm, at the corpus and at 10x it; docs/results/pretraining.md). A few minutes on a
# 2-core CPU.
source "$(dirname "$0")/help.sh" "$@"
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${repo}/.venv/bin/python"

corpus="${1:-}"
if [[ $# -gt 0 ]]; then shift; fi
if [[ -z "${corpus}" ]]; then
  corpus=/work/shared/data/corpus/legal_zh.txt
  if [[ ! -f "${corpus}" ]]; then
    # No real corpus here: generate ~600 KB of Chinese-like documents from the vocabulary.
    corpus="$(mktemp -d)/generated_zh.txt"
    "${python}" - "${repo}/vocab/chinese_vocab.txt" "${corpus}" <<'PY'
import random, sys
chars = [t for t in open(sys.argv[1], encoding="utf-8").read().split("\n")
         if len(t) == 1 and "\u4e00" <= t <= "\u9fff"]
rng = random.Random(0)
with open(sys.argv[2], "w", encoding="utf-8") as out:
  for _ in range(430):
    for _ in range(rng.randint(1, 20)):
      out.write("".join(rng.choice(chars) for _ in range(rng.randint(20, 120))) + "。\n")
    out.write("\n")
PY
  fi
fi

exec "${python}" "${repo}/benchmarks/pretraining_data_bench.py" --corpus="${corpus}" "$@"
