"""ELECTRA's prior trap is not silent: while the discriminator has learned only the share of
replaced tokens (loss = that share's binary entropy, no replaced token caught) and its encoder's
outputs have collapsed, eval_results.txt, the log and export/WARNING.txt say so; once it leaves
the prior, they do not."""

import os
import random

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import create_pretraining_data
import modeling
from pretraining import electra as electra_pretraining
import pretraining_helpers
from script_runner import run_script

WORDS, VOCAB = pretraining_helpers.WORDS, pretraining_helpers.VOCAB
SEQ, SLOTS = 16, 4
CONFIG = dict(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
              intermediate_size=64, max_position_embeddings=SEQ, type_vocab_size=2,
              hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def test_the_prior_loss_is_the_binary_entropy_of_the_replaced_share():
  # The figure: a discriminator at the prior of a 12.6% replaced share has loss 0.378.
  assert abs(electra_pretraining.binary_entropy(0.126) - 0.378) < 1e-3
  assert electra_pretraining.binary_entropy(0.0) == 0.0
  # ... which is the loss of always predicting the share: the best a model can do without
  # looking at the tokens.
  labels = np.random.RandomState(0).rand(100000) < 0.126
  share = labels.mean()
  always_share = -np.mean(np.where(labels, np.log(share), np.log(1 - share)))
  assert abs(always_share - electra_pretraining.binary_entropy(share)) < 1e-12


def _results(loss, recall, share=0.126):
  return {"discriminator_loss": loss, "discriminator_recall": recall, "replaced_share": share,
          "discriminator_prior_loss": electra_pretraining.binary_entropy(share),
          "encoder_output_spread": 0.004}


def test_at_prior_needs_the_prior_loss_and_no_replaced_token_caught():
  assert electra_pretraining.at_prior(_results(0.378, 0.0))
  assert electra_pretraining.at_prior(_results(0.370, 0.01))
  assert not electra_pretraining.at_prior(_results(0.330, 0.0))  # 13% under the prior: learning
  assert not electra_pretraining.at_prior(_results(0.693, 0.0))  # untrained: above it
  assert not electra_pretraining.at_prior(_results(0.378, 0.2))  # catches replaced tokens
  text = electra_pretraining.prior_warning(_results(0.378, 0.0), "dev", 50.0)
  assert "may fine-tune worse than a random start" in text and "0.004" in text
  assert "pulled every token to nearly one vector" in text
  assert electra_pretraining.prior_warning(_results(0.330, 0.0), "dev", 50.0) is None


def test_worse_than_the_prior_is_flagged_too():
  """The check is two-sided: a loss above the prior with nothing caught (the issue's 0.514
  against 0.405, recall 0; an untrained 0.693), or an encoder that gives every token one vector
  (lr 50: loss 2.06, spread 0.000), is flagged as the prior is."""
  share = 0.15
  prior = electra_pretraining.binary_entropy(share)
  assert abs(prior - 0.4227) < 1e-3
  cases = [(_results(0.514, 0.0, share=0.135), True), (_results(0.693, 0.0), True),
           (dict(_results(2.06, 0.0), encoder_output_spread=0.0), True),
           (dict(_results(0.30, 0.6), encoder_output_spread=0.0004), True),
           (_results(0.378, 0.0), False),  # at the prior: the other check
           (_results(0.330, 0.0), False),  # under the prior: learning
           (dict(_results(0.60, 0.3), encoder_output_spread=0.5), False)]  # catches some
  for results, worse in cases:
    assert electra_pretraining.worse_than_prior(results) == worse, results
  text = electra_pretraining.prior_warning(_results(0.514, 0.0, share=0.135), "dev", 50.0)
  assert text.startswith("WARNING: this ELECTRA discriminator does worse than the prior")
  assert "its loss is 0.5140, above the 0.3958 of always predicting" in text
  assert "lower --learning_rate" in text
  assert "lower --learning_rate" not in electra_pretraining.prior_warning(
      _results(0.378, 0.0), "dev", 50.0)


def _spread_directly(vectors, mask):
  """output_spread computed from the whole [N, L, H] array (what the sums stand for)."""
  tokens = vectors[mask > 0].astype(np.float64)
  rms = np.mean(np.sqrt(np.mean(tokens ** 2, axis=1)))
  return np.mean(np.std(tokens, axis=0)) / rms


def test_output_spread_from_per_example_sums_is_the_spread_over_all_tokens():
  rng = np.random.RandomState(0)
  config = modeling.BertConfig(**CONFIG)
  ids = rng.randint(5, len(VOCAB), size=[6, SEQ]).astype(np.int32)
  mask = np.ones_like(ids)
  mask[::2, 10:] = 0
  with tf.Graph().as_default(), tf.Session() as sess:
    tf.set_random_seed(0)
    model = modeling.BertModel(config, False, tf.constant(ids), tf.constant(mask))
    vectors = model.get_sequence_output()
    collapsed = tf.tile(vectors[:1, :1], [6, SEQ, 1]) + 1e-3 * vectors
    sums = [electra_pretraining.token_vector_sums(v, tf.constant(mask))
            for v in (vectors, collapsed)]
    sess.run(tf.global_variables_initializer())
    (random_sums, collapsed_sums), values, collapsed_values = sess.run(
        [sums, vectors, collapsed])
  spread = electra_pretraining.output_spread(dict(random_sums, input_mask=mask))
  assert abs(spread - _spread_directly(values, mask)) < 1e-5
  assert 0.5 < spread < 1.0  # a random BERT's tokens differ (about 0.8)
  flat = electra_pretraining.output_spread(dict(collapsed_sums, input_mask=mask))
  assert abs(flat - _spread_directly(collapsed_values, mask)) < 1e-5
  assert flat < 0.01


@pytest.fixture(scope="module")
def ordered_records(tmp_path_factory):
  """Records of sentences that run through WORDS in order ("echo foxtrot golf ..."): a replaced
  word breaks the sequence, so the discriminator can learn to see it."""
  paths = pretraining_helpers.write_tiny_corpus(tmp_path_factory.mktemp("prior"), CONFIG,
                                                documents=1)
  rng = random.Random(1)
  with open(paths["corpus"], "w") as f:
    for _ in range(40):
      for _ in range(rng.randint(2, 4)):
        start, length = rng.randrange(len(WORDS)), rng.randint(4, 10)
        f.write(" ".join(WORDS[(start + k) % len(WORDS)] for k in range(length)) + " .\n")
      f.write("\n")
  records = str(paths["root"] / "records.tfrecord")
  create_pretraining_data.run(create_pretraining_data.Options(
      input_file=paths["corpus"], output_file=records, vocab_file=paths["vocab"],
      max_seq_length=SEQ, max_predictions_per_seq=SLOTS, dupe_factor=2, no_nsp=True))
  return dict(paths, records=records)


def _train(data, out, steps):
  proc = run_script("run_pretraining_mgpu.py", "--input_file=" + data["records"],
                    "--output_dir=" + out, "--vocab_file=" + data["vocab"],
                    "--bert_config_file=" + data["config"], "--objective=electra",
                    "--train_batch_size=4", "--n_gpus=2", "--num_warmup_steps=0",
                    "--learning_rate=1e-3", "--num_train_steps=%d" % steps,
                    "--save_checkpoints_steps=1000", "--do_train", "--do_eval",
                    "--max_eval_steps=0", "--eval_batch_size=8")
  assert proc.returncode == 0, proc.stderr[-3000:]
  with open(os.path.join(out, "eval_results.txt")) as f:
    results = dict(line.rstrip("\n").split(" = ", 1) for line in f)
  return proc.stderr, results


def test_a_run_at_the_prior_says_so_and_stops_saying_it_once_it_has_left(ordered_records,
                                                                          tmp_path):
  out = str(tmp_path / "electra")
  warning_file = os.path.join(out, "export", electra_pretraining.EXPORT_WARNING)
  # 30 steps: the discriminator predicts the base rate, and its outputs have collapsed.
  log, results = _train(ordered_records, out, 30)
  assert results["discriminator_at_prior"] == "1"
  assert float(results["discriminator_recall"]) < 0.05
  prior = float(results["discriminator_prior_loss"])
  assert abs(float(results["discriminator_loss"]) - prior) < 0.03 * prior
  assert float(results["encoder_output_spread"]) < 0.1
  assert "may fine-tune worse than a random start" in results["warning"]
  assert "WARNING: this ELECTRA discriminator sits at the prior" in log
  assert "eval_results.txt: the discriminator sits at the prior" in log
  with open(warning_file) as f:
    note = f.read()
  assert "step 30" in note and "--disc_weight" in note and "train longer" in note
  # The note travels with the model to Hugging Face.
  hf_dir = str(tmp_path / "hf")
  proc = run_script("convert_to_hf.py", "--checkpoint=" + os.path.join(out, "export"),
                    "--bert_config_file=" + ordered_records["config"],
                    "--vocab_file=" + ordered_records["vocab"], "--output_dir=" + hf_dir)
  assert proc.returncode == 0, proc.stderr[-3000:]
  with open(os.path.join(hf_dir, "discriminator", electra_pretraining.EXPORT_WARNING)) as f:
    assert f.read() == note

  # 300 steps (resumed): the loss is well under the prior and the outputs differ again.
  log, results = _train(ordered_records, out, 300)
  assert results["discriminator_at_prior"] == "0" and "warning" not in results
  assert float(results["discriminator_loss"]) < 0.95 * float(results["discriminator_prior_loss"])
  assert float(results["discriminator_auc"]) > 0.6
  assert float(results["encoder_output_spread"]) > 0.3
  assert "The discriminator has left the prior" in log and "sits at the prior" not in log
  assert not os.path.exists(warning_file)
