"""Pipeline stages: one tower's BERT cut into K stages, each stage on its own device.

When it pays. Data parallelism needs the whole model, its gradients and its Adam slots on every
card; a stage holds about 1/K of them, so a model (or a batch) that does not fit one card fits
K. When the model fits, data parallelism is faster: a pipeline idles (see the bubble below) and
moves activations between stages.

The cut (`plan_stages`). The encoder layers are split into K contiguous groups. The embeddings
(but for the word-embedding table) go with the first stage, the pooler and every task head with
the last. The word-embedding table is used by the first stage (lookup) and, when the head ties
it (masked LM, rewrite output layer), by the last; it is placed with whichever stage balances
better. The lookup's gather runs where the table is, so only the looked-up rows (and their
gradient) cross to the first stage; a tied output layer on the other stage reads the whole
table (and sends back its dense gradient) every step. One copy, stock names, and the update
equals the unsplit model's: TensorFlow sums both uses' gradients into one. The split minimises the
largest stage's parameters (and so its gradients and Adam slots: memory is why one pipelines),
with the layers' FLOPs breaking ties. A stage that holds the word-embedding table then holds
fewer layers and computes less; the others set the pace.

The schedule (GPipe fill-drain). Each tower's batch is split into M micro-batches, each built as
its own subgraph through the same stage devices (variables are reused). The dataflow executor
runs micro-batch m on stage s as soon as stage s-1 has produced it, so the stages overlap:
all forward passes fill the pipeline, then the backward passes drain it. A stage idles for
K-1 of the M+K-1 slots of each phase: the bubble is (K-1)/(M+K-1), so M >= 4K keeps it under
20%. Memory: a stage keeps the activations of all M micro-batches until their backward pass
(GPipe); 1F1B, which would keep at most K, needs control edges between micro-batches and is not
built. The M micro-batch losses are averaged and differentiated together, so one update equals
the unsplit model's update on the same batch.

How the model is placed without knowing it: modeling.BertModel names its parts ("embeddings",
("layer", k), "pooler") to the placer of modeling.part_placement_scope; `StagePlacer` answers
with a device. Everything the task builds around the model (heads, losses) runs on the last
stage.
"""

import collections
import functools

import tensorflow.compat.v1 as tf

from core.errors import InputError

_VARIABLE_OP_TYPES = frozenset(["Variable", "VariableV2", "VarHandleOp", "AutoReloadVariable"])
_GATHER_OP_TYPES = frozenset(["GatherV2", "ResourceGather"])

StagePlan = collections.namedtuple("StagePlan", [
    "layer_stage",  # stage of each encoder layer
    "word_embedding_stage",  # 0 or K-1
    "stage_parameters",  # parameters (elements) of each stage, the task head excluded
])


def _part_parameters(config):
  """(word table, other embeddings, one layer, pooler) parameter counts of a BertConfig."""
  h, i = config.hidden_size, config.intermediate_size
  word = config.vocab_size * h
  other = (config.max_position_embeddings + config.type_vocab_size) * h + 2 * h
  layer = 4 * h * h + 4 * h + 2 * h * i + i + h + 4 * h
  return word, other, layer, h * h + h


def plan_stages(config, num_stages):
  """The balanced cut of `config`'s BERT into `num_stages` stages (see the module docstring).

  Raises:
    InputError: more stages than encoder layers (plus the embeddings).
  """
  layers = config.num_hidden_layers
  if num_stages > layers + 1:
    raise InputError("--pipeline_stages=%d exceeds num_hidden_layers + 1 = %d: every stage but "
                     "the embeddings' needs an encoder layer" % (num_stages, layers + 1))
  word, other, layer, pooler = _part_parameters(config)
  total_params = float(word + other + layers * layer + pooler)
  best = None
  for word_stage in (0, num_stages - 1):
    extra = [0.0] * num_stages
    extra[0] += other
    extra[-1] += pooler
    extra[word_stage] += word

    def cost(stage, n_layers, extra=extra):
      # Memory first (parameters, hence gradients and Adam slots); FLOPs break ties.
      return (extra[stage] + n_layers * layer) / total_params + 1e-3 * n_layers / layers

    # The stage holding the word-embedding table may hold no layer (embeddings only).
    minimum = [0 if s == word_stage else 1 for s in range(num_stages)]
    counts = _balanced_counts(layers, minimum, cost)
    worst = max(cost(s, n) for s, n in enumerate(counts))
    if best is None or worst < best[0]:
      best = (worst, word_stage, counts, extra)
  _, word_stage, counts, extra = best
  layer_stage = [s for s, n in enumerate(counts) for _ in range(n)]
  return StagePlan(layer_stage, word_stage,
                   [int(extra[s] + n * layer) for s, n in enumerate(counts)])


def _balanced_counts(layers, minimum, cost):
  """Layers per stage (in order, at least minimum[s]) minimising the largest cost(stage, n)."""
  stages = len(minimum)

  @functools.lru_cache(maxsize=None)
  def best(stage, n):
    """(largest cost, counts) of stages stage.. holding the last n layers."""
    if stage == stages - 1:
      return (cost(stage, n), (n,)) if n >= minimum[stage] else (float("inf"), ())
    options = [(float("inf"), ())]
    for k in range(minimum[stage], n - sum(minimum[stage + 1:]) + 1):
      rest_cost, rest = best(stage + 1, n - k)
      options.append((max(cost(stage, k), rest_cost), (k,) + rest))
    return min(options)

  return list(best(0, layers)[1])


class StagePlacer(object):
  """The part placer of one tower: which of its stage devices each model part runs on."""

  def __init__(self, stage_devices):
    """stage_devices: the tower's device of each stage, first to last."""
    self.stage_devices = list(stage_devices)
    self.plan = None

  def begin(self, config):
    """Called by BertModel with its config: cuts it (the same cut for every model built)."""
    plan = plan_stages(config, len(self.stage_devices))
    if self.plan is not None and plan != self.plan:
      raise ValueError("two BERT models of different shapes in one pipelined tower")
    self.plan = plan

  def device(self, part, index=None):
    """Device (or device function) of a model part: "embeddings", "layer" k or "pooler"."""
    if part == "layer":
      return self.stage_devices[self.plan.layer_stage[index]]
    if part == "pooler":
      return self.stage_devices[-1]
    word_device = self.stage_devices[self.plan.word_embedding_stage]
    first = self.stage_devices[0]

    def embeddings_device(op):
      if op.type in _VARIABLE_OP_TYPES and op.name.endswith("word_embeddings"):
        return word_device
      if op.type in _GATHER_OP_TYPES and "word_embeddings" in op.inputs[0].name:
        return word_device  # Only the looked-up rows cross to the first stage, not the table.
      return first

    return embeddings_device
