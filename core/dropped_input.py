"""How much of its input a run left out, said in one line: the share, what was cut and why.

A data tool or run that cuts or skips part of what it reads (text past --max_seq_length, a
document too short for an instance, a line with no token) reports it here: a log line with the
count, the share and the reason, and a warning when the share is above WARN_SHARE. So a corpus
whose text sits on one long line (create_pretraining_data.py keeps 0.04% of it) or a classifier
whose documents are mostly cut is not taken for a sound run.

WARN_SHARE is 10%: above what stock BERT's data tool cuts from a corpus of one sentence per
line (its sentence pairs overshoot --max_seq_length by part of a sentence: 6% of the tokens of
sentences of 10-40 tokens at --max_seq_length=128, under 0.1% at 512), and small enough that a
run losing one token in ten says so.
"""

from absl import logging

WARN_SHARE = 0.1


def report(what, dropped, total, unit, why):
  """Logs that `dropped` of `total` `unit` of `what` were left out, and `why`.

  Args:
    what: names the input, e.g. "train.tsv" or "create_pretraining_data.py".
    dropped, total: counts of `unit` (e.g. "tokens", "examples").
    unit: what is counted.
    why: the reason and the remedy, e.g. "cut by --max_seq_length=128 (use --long_text=sliding
      to read whole documents)".

  Returns:
    the share dropped (0.0 when nothing was, and nothing is logged then).
  """
  if not dropped:
    return 0.0
  share = dropped / float(max(total, 1))
  log = logging.warning if share > WARN_SHARE else logging.info
  log("%s: %d of %d %s (%s) %s%s", what, dropped, total, unit, _percent(dropped, total), why,
      " (more than %g%% of the input)" % (100 * WARN_SHARE) if share > WARN_SHARE else "")
  return share


def _percent(part, whole):
  """part / whole in percent with 2 decimals, rounded down: a part is never shown as 100.00%,
  and a share under 0.01% as <0.01%."""
  hundredths = part * 10000 // max(whole, 1)
  return "%d.%02d%%" % divmod(hundredths, 100) if hundredths else "<0.01%"
