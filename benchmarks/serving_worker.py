"""One contender of serving_compare.py, serving texts in a process of its own.

  python benchmarks/serving_worker.py --kind=savedmodel --model=out/task/saved_model \
    --texts=texts.json --threads=2

Kinds, each from raw text to classifier logits, as a user of that tool would serve:
  savedmodel    our SavedModel (--do_export): tf.saved_model.load and its serving_default
                signature, which tokenizes in the graph and trims each batch to its longest row;
  tflite        the same export's assets/model.tflite (--do_export --export_tflite; --model is
                the SavedModel directory) through serving/tflite_classifier.py: TensorFlow
                Lite's XNNPACK kernels, texts tokenized in Python as the run script does,
                each batch padded to its longest row;
  onnxruntime   an ONNX file of the Hugging Face conversion (--model), run by onnxruntime's
                InferenceSession (CPU, graph optimizations at their default: all), behind the
                converted model's fast Hugging Face tokenizer (--tokenizer) padding each batch
                to its longest row;
  transformers  the Hugging Face conversion (--model) with AutoModelForSequenceClassification,
                eager, under torch.inference_mode, behind the same tokenizer;
  onnx_export   no serving: writes --model (a Hugging Face directory) to --onnx_out with
                torch.onnx.export (inputs input_ids, attention_mask, token_type_ids [batch,
                seq], output logits [batch, labels], both axes dynamic) and exits.
--weight_cache (savedmodel): sets TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1 before TensorFlow loads, so
oneDNN reorders each weight matrix into its blocked layout once and keeps it, instead of on every
call (safe in a process that only serves; never in one that trains: the weights would stay as
first read).
--precision=bf16: the SavedModel given is a bfloat16 one (--export_precision=bf16);
transformers runs under torch.autocast("cpu", bfloat16); onnxruntime has no bfloat16 kernels on
its CPU provider and refuses.

Protocol (stdin/stdout, one JSON line each): after loading it prints {"ready": true, ...}; then
"run B [N]" serves every text (the first N) at batch B once and answers {"latencies": [seconds per call]};
"logits B" answers {"logits": [[...], ...]} of every text at batch B; "quit" (or the end of
stdin) ends it. Only this process's own calls are timed, so serving_compare.py can interleave
the contenders round by round.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _repo_on_path():
  """Lets the product's packages (core, serving) be imported; only the kinds that need them do
  it, so the other contenders' processes load nothing of ours."""
  if _REPO not in sys.path:
    sys.path.insert(0, _REPO)


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--kind", required=True,
                 choices=["savedmodel", "tflite", "onnxruntime", "transformers",
                          "onnx_export"])
  p.add_argument("--model", required=True,
                 help="SavedModel directory (savedmodel, tflite), ONNX file (onnxruntime) or "
                 "Hugging Face directory (transformers, onnx_export).")
  p.add_argument("--tokenizer", default=None,
                 help="Hugging Face directory of the tokenizer (onnxruntime).")
  p.add_argument("--texts", default=None,
                 help="JSON file: {\"text_a\": [...], \"text_b\": [...] or null}.")
  p.add_argument("--max_seq_length", type=int, default=128,
                 help="Truncation of the Hugging Face tokenizer (the SavedModel has its own).")
  p.add_argument("--threads", type=int, default=2, help="Intra-op threads.")
  p.add_argument("--inter_op_threads", type=int, default=1,
                 help="Inter-op threads (TensorFlow, onnxruntime, torch).")
  p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
  p.add_argument("--onnx_out", default=None, help="onnx_export: the ONNX file to write.")
  p.add_argument("--weight_cache", action="store_true",
                 help="savedmodel: TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1 (see above).")
  return p.parse_args(argv)


def as_float64(logits):
  """logits as a float64 numpy array [batch, labels] (what every kind answers)."""
  return np.asarray(logits, dtype=np.float64)


class SavedModelServer(object):
  """Our SavedModel's serving_default: texts in, logits out."""

  def __init__(self, args):
    if args.weight_cache:
      os.environ["TF_ONEDNN_ASSUME_FROZEN_WEIGHTS"] = "1"
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.inter_op_threads)
    self._tf = tf
    self._signature = tf.saved_model.load(args.model).signatures["serving_default"]
    self.pairs = "text_b" in self._signature.structured_input_signature[1]
    self.about = {"tensorflow": tf.__version__}

  def __call__(self, text_a, text_b):
    inputs = {"text_a": self._tf.constant(text_a)}
    if self.pairs:
      inputs["text_b"] = self._tf.constant(text_b)
    return self._signature(**inputs)["logits"].numpy()


class TfliteServer(object):
  """The export's TensorFlow Lite model (serving/tflite_classifier.py): texts in, logits out."""

  def __init__(self, args):
    if args.precision != "fp32":
      raise SystemExit("error: --kind=tflite: the TFLite export is fp32 only; run it with "
                       "--precision=fp32")
    _repo_on_path()
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from serving import tflite_classifier  # pylint: disable=g-import-not-at-top
    self._model = tflite_classifier.TfliteClassifier(args.model, num_threads=args.threads)
    self.about = {"tensorflow": tf.__version__}

  def __call__(self, text_a, text_b):
    return self._model.classify(text_a, text_b)["logits"]


class HfTokenized(object):
  """Texts -> numpy int64 input_ids, attention_mask, token_type_ids, padded to the longest."""

  def __init__(self, tokenizer_dir, max_seq_length):
    import transformers  # pylint: disable=g-import-not-at-top
    self.tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    self.max_seq_length = max_seq_length

  def encode(self, text_a, text_b, tensors):
    return self.tokenizer(text_a, text_b, padding="longest", truncation="longest_first",
                          max_length=self.max_seq_length, return_tensors=tensors)


class OnnxServer(HfTokenized):
  """onnxruntime's InferenceSession on the exported model, behind the fast tokenizer."""

  def __init__(self, args):
    if args.precision != "fp32":
      raise SystemExit("error: --kind=onnxruntime: onnxruntime's CPU provider has no bfloat16 "
                       "kernels; run it with --precision=fp32")
    import onnxruntime  # pylint: disable=g-import-not-at-top
    super().__init__(args.tokenizer, args.max_seq_length)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.inter_op_num_threads = args.inter_op_threads
    self._session = onnxruntime.InferenceSession(args.model, options,
                                                 providers=["CPUExecutionProvider"])
    self._inputs = [i.name for i in self._session.get_inputs()]
    self.about = {"onnxruntime": onnxruntime.__version__}

  def __call__(self, text_a, text_b):
    encoded = self.encode(text_a, text_b, "np")
    feeds = {name: encoded[name].astype(np.int64) for name in self._inputs}
    return self._session.run(["logits"], feeds)[0]


class TransformersServer(HfTokenized):
  """AutoModelForSequenceClassification, eager, behind the fast tokenizer."""

  def __init__(self, args):
    import torch  # pylint: disable=g-import-not-at-top
    import transformers  # pylint: disable=g-import-not-at-top
    super().__init__(args.model, args.max_seq_length)
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(args.inter_op_threads)
    self._torch = torch
    self._model = transformers.AutoModelForSequenceClassification.from_pretrained(args.model)
    self._model.eval()
    self._bf16 = args.precision == "bf16"
    self.about = {"torch": torch.__version__, "transformers": transformers.__version__,
                  "attention": getattr(self._model.config, "_attn_implementation", "default")}

  def __call__(self, text_a, text_b):
    encoded = self.encode(text_a, text_b, "pt")
    with self._torch.inference_mode(), self._torch.autocast("cpu", dtype=self._torch.bfloat16,
                                                            enabled=self._bf16):
      return self._model(**encoded).logits.float().numpy()


def export_onnx(args):
  """Writes args.model (Hugging Face) as ONNX to args.onnx_out (opset 17, dynamic axes)."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  model = transformers.AutoModelForSequenceClassification.from_pretrained(args.model)
  model.eval()
  names = ["input_ids", "attention_mask", "token_type_ids"]
  example = tuple(torch.ones((2, 16), dtype=torch.int64) for _ in names)
  axes = {name: {0: "batch", 1: "sequence"} for name in names}
  axes["logits"] = {0: "batch"}

  class LogitsOnly(torch.nn.Module):
    def __init__(self, inner):
      super().__init__()
      self.inner = inner

    def forward(self, input_ids, attention_mask, token_type_ids):
      return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                        token_type_ids=token_type_ids).logits

  _repo_on_path()
  from core import atomic_files  # pylint: disable=g-import-not-at-top

  def write(tmp_path):  # whole or not at all: a cut ONNX file would be reused by the next run
    with torch.no_grad():
      torch.onnx.export(LogitsOnly(model), example, tmp_path, input_names=names,
                        output_names=["logits"], dynamic_axes=axes, opset_version=17,
                        dynamo=False)

  atomic_files.write_atomically(args.onnx_out, write)


SERVERS = {"savedmodel": SavedModelServer, "tflite": TfliteServer,
           "onnxruntime": OnnxServer, "transformers": TransformersServer}


def batches(texts, batch_size):
  """(text_a, text_b or None) lists of `batch_size` texts, in order."""
  text_a, text_b = texts["text_a"], texts.get("text_b")
  for start in range(0, len(text_a), batch_size):
    yield (text_a[start:start + batch_size],
           text_b[start:start + batch_size] if text_b else None)


def main(argv=None):
  args = parse_args(argv)
  if args.kind == "onnx_export":
    export_onnx(args)
    return
  with open(args.texts, encoding="utf-8") as f:
    texts = json.load(f)
  server = SERVERS[args.kind](args)
  for text_a, text_b in batches(texts, 32):  # warm-up: every batch shape of the runs below
    server(text_a[:1], text_b[:1] if text_b else None)
    server(text_a, text_b)
  print(json.dumps(dict(server.about, ready=True)), flush=True)
  for line in sys.stdin:
    command, size, count = (line.split() + ["0", "0"])[:3]
    if command == "run":  # run B [N]: the first N texts (all when N is 0 or absent)
      latencies = []
      subset = {name: value[:int(count) or None] if value else value
                for name, value in texts.items()}
      for text_a, text_b in batches(subset, int(size)):
        start = time.perf_counter()
        server(text_a, text_b)
        latencies.append(time.perf_counter() - start)
      print(json.dumps({"latencies": latencies}), flush=True)
    elif command == "logits":
      logits = [as_float64(server(a, b)).tolist() for a, b in batches(texts, int(size))]
      print(json.dumps({"logits": [row for chunk in logits for row in chunk]}), flush=True)
    else:
      break


if __name__ == "__main__":
  main()
