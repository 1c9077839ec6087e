"""Does this project's ELECTRA make the same updates as transformers' ELECTRA on the same weights?

Our side is pretraining/electra_model.py's Electra (generator + discriminator on shared
embeddings) with optimization.create_train_op_from_grads (BERT's AdamWeightDecay, schedule, and
clipping to a true global norm of 1.0: optimization.global_norm). The transformers side is an
ElectraForMaskedLM (the generator) and an ElectraForPreTraining (the discriminator) whose
embeddings are one module (and whose generator_lm_head.weight is the shared word table, as in
ELECTRA), loaded with the same weights through serving/hf_electra.py's stock_name_to_hf,
trained with hf_finetune.bert_optimizer and torch's clip_grad_norm_(1.0) on loss = generator loss
+ --disc_weight x discriminator loss.

Both sides see the same synthetic batches (random token ids, some rows padded, masked slots
holding [MASK]; one slot of a row left empty), dropout off. The generator's sampling is the one
place chance enters; it is made common: each side draws argmax(log_probs + g) with the same
Gumbel noise g (fed to both), which is a sample from softmax(log_probs). The sampled tokens must
then agree exactly, and the script says so.

Two known differences are set aside, each printed: modeling.py's "gelu" is the tanh
approximation, so transformers gets hidden_act="gelu_new"; and transformers'
ElectraGeneratorPredictions hard-codes the exact (erf) GELU whatever hidden_act says, while ours
(as Google's ELECTRA) uses hidden_act there, so that one activation is set to gelu_new too
(--keep_hf_generator_gelu leaves it: with these small random weights the head's inputs stay
near 0, where the two GELUs differ little, so the gap stays under 1e-5 here; it grows with the
activations).

Printed per update: generator loss, discriminator loss (unweighted) and the global gradient norm
of both sides, the largest gradient difference over every variable (unclipped gradients of
loss, whose norm is about 16 with the 50x weight; also as a share of that norm), and the largest
variable difference after the update (clipped, as applied).

  python benchmarks/electra_parity.py --steps=3
"""

import argparse
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.dirname(_HERE))

import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position

SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
PAD_ID, CLS_ID, SEP_ID, MASK_ID = 0, 2, 3, 4


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--steps", type=int, default=3, help="Updates compared.")
  p.add_argument("--vocab_size", type=int, default=96)
  p.add_argument("--hidden_size", type=int, default=64)
  p.add_argument("--num_hidden_layers", type=int, default=2)
  p.add_argument("--num_attention_heads", type=int, default=4)
  p.add_argument("--generator_hidden_ratio", type=float, default=0.25)
  p.add_argument("--batch_size", type=int, default=4)
  p.add_argument("--max_seq_length", type=int, default=24)
  p.add_argument("--max_predictions_per_seq", type=int, default=5)
  p.add_argument("--disc_weight", type=float, default=50.0)
  p.add_argument("--learning_rate", type=float, default=5e-4)
  p.add_argument("--num_train_steps", type=int, default=100,
                 help="The schedule's length (no warm-up: the first update uses the peak rate).")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--keep_hf_generator_gelu", action="store_true",
                 help="Leave transformers' generator head on its erf GELU (shows the gap).")
  p.add_argument("--threads", type=int, default=os.cpu_count())
  return p.parse_args(argv)


def make_config(args):
  """The discriminator's modeling.BertConfig (dropout off)."""
  import modeling  # pylint: disable=g-import-not-at-top
  return modeling.BertConfig(
      vocab_size=args.vocab_size, hidden_size=args.hidden_size,
      num_hidden_layers=args.num_hidden_layers, num_attention_heads=args.num_attention_heads,
      intermediate_size=2 * args.hidden_size, max_position_embeddings=args.max_seq_length,
      type_vocab_size=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def make_batches(args):
  """One dict of numpy features per step: input_ids, input_mask, segment_ids int32 [B, L];
  masked_lm_positions, masked_lm_ids int32 [B, P], masked_lm_weights float32 [B, P]; and
  gumbel float32 [B * P, V], the sampling noise."""
  rng = np.random.RandomState(args.seed + 1)
  rows, seq, slots = args.batch_size, args.max_seq_length, args.max_predictions_per_seq
  batches = []
  for _ in range(args.steps):
    ids = rng.randint(len(SPECIAL), args.vocab_size, size=[rows, seq]).astype(np.int32)
    mask = np.ones([rows, seq], np.int32)
    lengths = [seq - (i % 2) * seq // 3 for i in range(rows)]
    segments = np.zeros([rows, seq], np.int32)
    positions = np.zeros([rows, slots], np.int32)
    labels = np.zeros([rows, slots], np.int32)
    weights = np.zeros([rows, slots], np.float32)
    for i, length in enumerate(lengths):
      ids[i, 0], ids[i, length - 1] = CLS_ID, SEP_ID
      ids[i, length:], mask[i, length:] = PAD_ID, 0
      segments[i, length // 2:length] = 1
      count = slots - (i % 2)  # odd rows leave their last slot empty
      chosen = np.sort(rng.choice(np.arange(1, length - 1), size=count, replace=False))
      positions[i, :count], labels[i, :count], weights[i, :count] = chosen, ids[i, chosen], 1.0
      ids[i, chosen] = MASK_ID
    gumbel = -np.log(-np.log(rng.uniform(1e-9, 1.0, [rows * slots, args.vocab_size])))
    batches.append(dict(input_ids=ids, input_mask=mask, segment_ids=segments,
                        masked_lm_positions=positions, masked_lm_ids=labels,
                        masked_lm_weights=weights, gumbel=gumbel.astype(np.float32)))
  return batches


def ours(args, config, batches):
  """Trains our ELECTRA on the batches.

  Returns:
    (initial weights {our name: numpy}, per step dicts of generator_loss, discriminator_loss,
    norm, samples [B, P], grads {name: numpy dense}, and after {name: numpy} the weights after
    the update).
  """
  import tensorflow.compat.v1 as tf  # pylint: disable=g-import-not-at-top
  import optimization  # pylint: disable=g-import-not-at-top
  from pretraining import electra_model  # pylint: disable=g-import-not-at-top
  tf.disable_v2_behavior()
  first = batches[0]
  with tf.Graph().as_default():
    tf.set_random_seed(args.seed)
    feeds = {name: tf.placeholder(tf.as_dtype(value.dtype), value.shape)
             for name, value in first.items()}
    sample_fn = lambda log_probs: tf.argmax(log_probs + feeds["gumbel"], axis=-1,
                                            output_type=tf.int32)
    model = electra_model.Electra(
        config, electra_model.generator_config(config, args.generator_hidden_ratio), False,
        feeds, args.disc_weight, sample_fn)
    tvars = tf.trainable_variables()
    grads_and_vars = [(g, v) for g, v in zip(tf.gradients(model.loss, tvars), tvars)
                      if g is not None]
    train_op, _ = optimization.create_train_op_from_grads(
        grads_and_vars, args.learning_rate, args.num_train_steps, 0)
    fetches = dict(generator_loss=model.generator_loss,
                   discriminator_loss=model.discriminator_loss, samples=model.samples,
                   norm=optimization.global_norm([g for g, _ in grads_and_vars]),
                   grads={v.op.name: tf.convert_to_tensor(g) for g, v in grads_and_vars})
    session_config = tf.ConfigProto(intra_op_parallelism_threads=args.threads)
    with tf.Session(config=session_config) as sess:
      sess.run(tf.global_variables_initializer())
      _randomize_offsets(sess, tvars, np.random.RandomState(args.seed))
      initial = {v.op.name: value for v, value in zip(tvars, sess.run(tvars))}
      steps = []
      for batch in batches:
        feed = {feeds[name]: value for name, value in batch.items()}
        values, _ = sess.run([fetches, train_op], feed)
        values["after"] = {v.op.name: value for v, value in zip(tvars, sess.run(tvars))}
        steps.append(values)
  return initial, steps


def _randomize_offsets(sess, tvars, rng):
  """Biases and LayerNorm betas/gammas drawn at random (they start at 0 and 1), so that a tensor
  mapped to the wrong name shows in the comparison."""
  for v in tvars:
    name = v.op.name
    if name.endswith(("bias", "beta", "gamma")):
      centre = 1.0 if name.endswith("gamma") else 0.0
      v.load(centre + rng.normal(0.0, 0.1, v.shape.as_list()).astype(np.float32), sess)


def hf_models(args, config, initial):
  """(container module with .generator and .discriminator, {our name: [(model, hf name,
  transpose)]}) with our initial weights, embeddings shared."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  from transformers.activations import ACT2FN  # pylint: disable=g-import-not-at-top
  from pretraining import electra_model  # pylint: disable=g-import-not-at-top
  from serving import hf_electra  # pylint: disable=g-import-not-at-top
  transformers.logging.set_verbosity_error()
  gen_config = electra_model.generator_config(config, args.generator_hidden_ratio)

  def electra_config(c):
    return transformers.ElectraConfig(
        vocab_size=c.vocab_size, embedding_size=config.hidden_size, hidden_size=c.hidden_size,
        num_hidden_layers=c.num_hidden_layers, num_attention_heads=c.num_attention_heads,
        intermediate_size=c.intermediate_size, hidden_act="gelu_new", hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, max_position_embeddings=c.max_position_embeddings,
        type_vocab_size=c.type_vocab_size, layer_norm_eps=1e-12, pad_token_id=PAD_ID,
        attn_implementation="eager")

  torch.manual_seed(args.seed)
  pair = torch.nn.Module()
  pair.discriminator = transformers.ElectraForPreTraining(electra_config(config))
  pair.generator = transformers.ElectraForMaskedLM(electra_config(gen_config))
  pair.generator.electra.embeddings = pair.discriminator.electra.embeddings
  pair.generator.generator_lm_head.weight = (
      pair.discriminator.electra.embeddings.word_embeddings.weight)
  if not args.keep_hf_generator_gelu:
    pair.generator.generator_predictions.activation = ACT2FN["gelu_new"]
  mapping = {name: hf_electra.stock_name_to_hf(name) for name in initial}
  loaded = set()
  with torch.no_grad():
    for name, value in initial.items():
      for model, hf_name, transpose in mapping[name]:
        param = getattr(pair, model).get_parameter(hf_name)
        param.copy_(torch.from_numpy(np.ascontiguousarray(value.T if transpose else value)))
        loaded.add(id(param))
  unloaded = [n for n, p in pair.named_parameters() if id(p) not in loaded]
  if unloaded:
    raise AssertionError("transformers parameters without a weight of ours: %s" % unloaded)
  return pair.eval(), mapping


def transformers_side(args, pair, batches):
  """Trains the transformers pair on the batches; per step dicts as ours() returns, with the
  tensors under transformers' names ("generator.electra...", "discriminator....")."""
  import torch  # pylint: disable=g-import-not-at-top
  import hf_finetune  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(args.threads)
  optimizer, scheduler = hf_finetune.bert_optimizer(pair, args.learning_rate,
                                                    args.num_train_steps, 0)
  steps = []
  for batch in batches:
    t = {k: torch.from_numpy(v) for k, v in batch.items()}
    ids, mask, segments = t["input_ids"].long(), t["input_mask"].long(), t["segment_ids"].long()
    positions, weights = t["masked_lm_positions"].long(), t["masked_lm_weights"] > 0
    rows = torch.arange(ids.shape[0])[:, None].expand_as(positions)
    labels = torch.full_like(ids, -100)
    labels[rows[weights], positions[weights]] = t["masked_lm_ids"].long()[weights]
    gen = pair.generator(input_ids=ids, attention_mask=mask, token_type_ids=segments,
                         labels=labels)
    with torch.no_grad():
      log_probs = torch.log_softmax(gen.logits[rows, positions], dim=-1).reshape(
          -1, gen.logits.shape[-1])
      samples = torch.argmax(log_probs + t["gumbel"], dim=-1).reshape(positions.shape)
      original = ids.clone()
      original[rows[weights], positions[weights]] = t["masked_lm_ids"].long()[weights]
      corrupted = original.clone()
      corrupted[rows[weights], positions[weights]] = samples[weights]
      replaced = (corrupted != original).long()
    disc = pair.discriminator(input_ids=corrupted, attention_mask=mask,
                              token_type_ids=segments, labels=replaced)
    (gen.loss + args.disc_weight * disc.loss).backward()
    norm = torch.nn.utils.clip_grad_norm_(pair.parameters(), 1.0)
    # clip_grad_norm_ scaled the gradients in place; the unclipped ones are compared.
    scale = max(1.0, float(norm) / 1.0)
    grads = {n: p.grad.detach().numpy() * scale for n, p in pair.named_parameters()
             if p.grad is not None}
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    steps.append(dict(generator_loss=gen.loss.item(), discriminator_loss=disc.loss.item(),
                      norm=float(norm), samples=samples.numpy(), grads=grads,
                      after={n: p.detach().numpy().copy() for n, p in pair.named_parameters()},
                      replaced=int(replaced[mask > 0].sum())))
  return steps


def compare(args):
  """Runs both sides; returns one dict per update with both sides' figures and the largest
  differences (gradients before clipping, weights after the update, over every variable)."""
  config = make_config(args)
  batches = make_batches(args)
  initial, our_steps = ours(args, config, batches)
  pair, mapping = hf_models(args, config, initial)
  hf_steps = transformers_side(args, pair, batches)
  hf_names = dict(pair.named_parameters())
  rows = []
  for step, (a, b) in enumerate(zip(our_steps, hf_steps)):
    grad_diff, weight_diff, compared = 0.0, 0.0, 0
    for name, value in a["after"].items():
      if not mapping[name]:
        continue  # bert/pooler/: ELECTRA has no pooler, and neither side trains it
      model, hf_name, transpose = mapping[name][0]
      full = _qualified(hf_names, getattr(pair, model), model, hf_name)
      flip = (lambda x: x.T) if transpose else (lambda x: x)
      grad_diff = max(grad_diff, float(np.abs(a["grads"][name] - flip(b["grads"][full])).max()))
      weight_diff = max(weight_diff, float(np.abs(value - flip(b["after"][full])).max()))
      compared += 1
    rows.append(dict(
        step=step + 1, ours=a, transformers=b, variables=compared,
        samples_equal=bool(np.array_equal(a["samples"], b["samples"])),
        generator_loss_diff=abs(float(a["generator_loss"]) - b["generator_loss"]),
        discriminator_loss_diff=abs(float(a["discriminator_loss"]) - b["discriminator_loss"]),
        norm_diff=abs(float(a["norm"]) - b["norm"]), grad_diff=grad_diff,
        relative_grad_diff=grad_diff / b["norm"], weight_diff=weight_diff))
  return rows


def _qualified(hf_names, module, model, hf_name):
  """The container's name of `model`'s parameter `hf_name` (a shared one is listed once)."""
  param = module.get_parameter(hf_name)
  for name, candidate in hf_names.items():
    if candidate is param:
      return name
  raise KeyError("%s.%s" % (model, hf_name))


def main(argv=None):
  args = parse_args(argv)
  import machine  # pylint: disable=g-import-not-at-top
  rows = compare(args)
  print("ELECTRA, ours vs transformers (ElectraForMaskedLM + ElectraForPreTraining, shared "
        "embeddings), %d updates; H=%d, %d layers, generator ratio %.2f, vocab %d, batch %dx%d, "
        "disc_weight %g, lr %g" % (args.steps, args.hidden_size, args.num_hidden_layers,
                                   args.generator_hidden_ratio, args.vocab_size,
                                   args.batch_size, args.max_seq_length, args.disc_weight,
                                   args.learning_rate))
  print("generator head activation on the transformers side: %s" %
        ("erf GELU (transformers' own)" if args.keep_hf_generator_gelu else "gelu_new"))
  print("update  generator loss       discriminator loss   replaced  grad norm  samples  "
        "|grad diff|  /norm     |weight diff|")
  print("        ours / transformers  ours / transformers")
  for r in rows:
    a, b = r["ours"], r["transformers"]
    print("%6d  %.6f / %.6f  %.6f / %.6f  %8d  %9.4f  %-7s  %.2e     %.2e  %.2e" % (
        r["step"], a["generator_loss"], b["generator_loss"], a["discriminator_loss"],
        b["discriminator_loss"], b["replaced"], b["norm"],
        "equal" if r["samples_equal"] else "DIFFER", r["grad_diff"], r["relative_grad_diff"],
        r["weight_diff"]))
  worst = {key: max(r[key] for r in rows) for key in (
      "generator_loss_diff", "discriminator_loss_diff", "norm_diff", "grad_diff",
      "relative_grad_diff", "weight_diff")}
  print("largest differences over %d updates and %d variables: generator loss %.2e, "
        "discriminator loss %.2e, gradient norm %.2e, gradient %.2e (%.2e of the norm), "
        "weight after update %.2e" %
        (len(rows), rows[0]["variables"], worst["generator_loss_diff"],
         worst["discriminator_loss_diff"], worst["norm_diff"], worst["grad_diff"],
         worst["relative_grad_diff"], worst["weight_diff"]))
  print("machine: %s" % machine.describe())
  return rows


if __name__ == "__main__":
  main()
