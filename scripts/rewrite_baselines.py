"""Scores the simple baselines of a rewrite data set with the metrics of eval_results.txt.

  python scripts/rewrite_baselines.py --data_file=csc/test.tsv                      # copy
  python scripts/rewrite_baselines.py --data_file=lcsts/dev.tsv \
      --column_order=target_source --lead_chars=20                               # lead-20

copy: the output is the source itself (the baseline of spelling correction, where most
characters are already right). lead-N: the first N characters of the source (the baseline of
headline/summary generation).
"""

import os
import sys

from absl import app
from absl import flags

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from rewrite import data as rewrite_data  # pylint: disable=g-import-not-at-top,wrong-import-position
from rewrite import metrics as rewrite_metrics  # pylint: disable=g-import-not-at-top,wrong-import-position

flags.DEFINE_string("data_file", None, "A TSV of source/target rows (see run_rewrite_finetune).")
flags.DEFINE_enum("column_order", "source_target", list(rewrite_data.COLUMN_ORDERS),
                  "Which column holds the source.")
flags.DEFINE_integer("lead_chars", 0,
                     "If > 0, the baseline output is the first lead_chars non-space characters "
                     "of the source; 0 copies the whole source.")

FLAGS = flags.FLAGS


def main(_):
  rows = rewrite_data.read_rewrite_tsv(FLAGS.data_file, FLAGS.column_order)
  outputs = [rewrite_metrics.normalize(row.source) for row in rows]
  if FLAGS.lead_chars > 0:
    outputs = [text[:FLAGS.lead_chars] for text in outputs]
  scores = rewrite_metrics.rewrite_scores(outputs, [row.target for row in rows])
  name = "lead-%d" % FLAGS.lead_chars if FLAGS.lead_chars > 0 else "copy"
  print("%s %s: %s" % (FLAGS.data_file, name, "  ".join(
      "%s=%.2f" % (k, v) for k, v in sorted(scores.items()))))


if __name__ == "__main__":
  flags.mark_flag_as_required("data_file")
  app.run(main)
