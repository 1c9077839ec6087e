"""benchmarks/electra_parity.py: our ELECTRA and transformers' (ElectraForMaskedLM +
ElectraForPreTraining on shared embeddings, the same weights, batch and Gumbel noise) give the
same losses, sampled tokens, gradients and updated weights. Skipped without torch and
transformers (requirements-bench.txt)."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))

import electra_parity  # pylint: disable=g-import-not-at-top,wrong-import-position


def test_two_updates_agree_with_transformers_within_1e_5():
  pytest.importorskip("torch", reason="torch is not installed (requirements-bench.txt)")
  pytest.importorskip("transformers", reason="transformers is not installed")
  args = electra_parity.parse_args(["--steps=2", "--hidden_size=32", "--num_attention_heads=2",
                                    "--batch_size=3", "--max_seq_length=16", "--threads=1"])
  rows = electra_parity.compare(args)
  assert len(rows) == 2
  for row in rows:
    ours, theirs = row["ours"], row["transformers"]
    assert row["samples_equal"]
    assert theirs["replaced"] > 0  # the discriminator has replaced tokens to find
    assert ours["generator_loss"] > 1.0 and ours["discriminator_loss"] > 0.1
    assert row["generator_loss_diff"] < 1e-5 and row["discriminator_loss_diff"] < 1e-5
    # Every variable but the untrained pooler; the gradients are those of the 50x-weighted loss.
    assert row["variables"] == len(ours["grads"]) == len(ours["after"]) - 2
    assert row["grad_diff"] < 1e-5 and row["weight_diff"] < 1e-5
    assert abs(ours["norm"] - theirs["norm"]) < 1e-5 * theirs["norm"]
  # The updates are real: the second moved the weights by far more than the tolerance.
  first, second = rows[0]["ours"]["after"], rows[1]["ours"]["after"]
  assert max(np.abs(second[name] - first[name]).max() for name in first) > 1e-4
