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

The schedules (`SCHEDULES`, --pipeline_schedule). Each tower's batch is split into M
micro-batches, each built as its own subgraph through the same stage devices (variables are
reused). The dataflow executor runs micro-batch m on stage s as soon as stage s-1 has produced
it, so the stages overlap. A stage idles for K-1 of the M+K-1 slots of each phase: the bubble is
(K-1)/(M+K-1), so M >= 4K keeps it under 20%.
- `GPipeSchedule` (gpipe, fill-drain): the M micro-batch losses are averaged and differentiated
  together; nothing orders the passes, so a stage may keep the activations of all M
  micro-batches until their backward pass (and TensorFlow sums each weight's M gradient
  contributions at once).
- `OneFOneBSchedule` (1f1b, PipeDream-flush as in Megatron-LM and DeepSpeed): one backward
  subgraph per micro-batch, and control edges so that stage s starts the forward pass of
  micro-batch m only once its backward pass of micro-batch m-(K-s) is done: at most K-s
  micro-batches' activations are live on stage s, whatever M is; the bubble is GPipe's. Needs
  M >= K. The weight gradients are summed micro-batch after micro-batch.
Both give one update equal to the unsplit model's on the same batch (tests/test_pipeline.py);
benchmarks/memory_bench.py measures their peak memory per stage, pipeline_bench.py their idle
share.

How the model is placed without knowing it: modeling.BertModel names its parts ("embeddings",
("layer", k), "pooler") to the placer of modeling.part_placement_scope; `StagePlacer` answers
with a device. Everything the task builds around the model (heads, losses) runs on the last
stage.

Two models in one tower (ELECTRA, pretraining/electra_model.py). The generator embeds with the
discriminator's tables and announces them with the discriminator's config (modeling.begin_model)
before anything else, so the discriminator sets the cut; the generator's layer k then goes to
the stage of the discriminator's layer at the same relative depth (the same k: it has the same
depth), its embedding projection to the first stage, its masked-LM head (tied to the shared
word table), the sampling and the corruption to the last. Why the same cut rather than the
whole generator on one stage: a generator layer of 1/4 the width holds about 1/16 of a
discriminator layer's parameters and 1/4 of its activations (1/4 of the width and of the
heads), so following the cut adds the same quarter to every stage's activations (and ~6% to its
layers' parameters) and keeps the discriminator's balance whatever K is. The whole generator on
one stage adds L/4 discriminator layers' worth of activations there: BERT-base at K=2 (cut 8/4
layers, the word table with the last stage) would hold 8 + 3 = 11 layer-equivalents on stage 0
against 8 + 2 = 10 with the cut; at K=4 (4/4/4/0 + table) a stage would grow from 4 to 7. (At
K=2 the generator whole on the last stage would even things, 8 against 4 + 3, but only there;
this is reasoned from the sizes, not measured.) The cost: a micro-batch crosses the stages twice
(generator, then discriminator), sending the generator's [rows, seq, Hg] activations and their
gradients over each boundary besides the discriminator's, and the corrupted ids [rows, seq] from
the last stage back to the first; the fill and drain of each phase grow by the generator's share
of the compute. Under 1F1B the gate of (stage s, micro-batch m) holds the entry ops of both
parts of m on stage s, so "at most K-s micro-batches live on stage s" still holds, counting a
micro-batch's generator and discriminator activations as one micro-batch; the gates only ever
wait for earlier micro-batches, so the two crossings add no cycle
(tests/test_electra_pipeline.py).
"""

import collections
import functools

import tensorflow.compat.v1 as tf
from tensorflow.core.protobuf import rewriter_config_pb2

from core.errors import InputError
from parallel import strategies

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
    self._layer_stage = None  # stage of each encoder layer of the model being built

  def begin(self, config):
    """Called (modeling.begin_model) with the config of each model about to be built.

    The first model of the tower sets the cut, plan_stages(config); every model built after
    it (the same model again for the next micro-batch, or ELECTRA's discriminator after its
    generator) keeps that cut. A model of another depth places its layer k with the first
    model's layer at the same relative depth (see "Two models in one tower" above).
    """
    if self.plan is None:
      self.plan = plan_stages(config, len(self.stage_devices))
    cut = self.plan.layer_stage
    layers = config.num_hidden_layers
    self._layer_stage = [cut[k * len(cut) // layers] for k in range(layers)]

  def device(self, part, index=None):
    """Device (or device function) of a model part: "embeddings", "layer" k or "pooler"."""
    if part == "layer":
      return self.stage_devices[self._layer_stage[index]]
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


def _canonical(device):
  return tf.DeviceSpec.from_string(device or "").to_string()


class GPipeSchedule(object):
  """Fill-drain: every micro-batch's forward pass, then one backward pass of their mean loss.

  The dataflow executor runs any forward op whose inputs are ready, so a stage may hold the
  activations of all M micro-batches at once. This is also the schedule of an unpipelined tower
  (one stage, one micro-batch).
  """

  def __init__(self, stage_devices, num_micro_batches):
    """stage_devices: the tower's device of each stage; num_micro_batches: M."""
    self.stage_devices = [_canonical(d) for d in stage_devices]
    self.num_micro_batches = num_micro_batches

  def forward(self, micro_batch, build_fn):
    """build_fn() -> its result: builds micro-batch `micro_batch`'s forward pass."""
    del micro_batch
    return build_fn()

  def gradients(self, losses, variables, loss_scale=None):
    """The gradients of the mean of `losses` (one scalar per micro-batch) times loss_scale.

    Returns:
      list aligned with `variables` (Tensor, IndexedSlices or None).
    """
    with tf.device(self.stage_devices[-1]):
      loss = losses[0] if len(losses) == 1 else tf.add_n(losses) / float(len(losses))
      if loss_scale is not None:
        loss = loss * tf.cast(loss_scale, loss.dtype)
    return tf.gradients(loss, variables, colocate_gradients_with_ops=True)


class OneFOneBSchedule(GPipeSchedule):
  """1F1B (PipeDream-flush): stage s holds at most K-s micro-batches' activations.

  Each micro-batch gets its own backward subgraph (the gradients of its loss / M), and control
  edges make the forward pass of micro-batch m on stage s wait until the backward pass of
  micro-batch m-(K-s) on stage s is done. Stage s thus runs K-s warm-up forward passes, then
  alternates one backward and one forward, then drains; the last stage alternates from the
  start. The per-micro-batch gradients are summed in micro-batch order (a chain of adds), so a
  stage keeps one running sum instead of M gradients. The sum of the gradients of loss_m / M
  is the gradient of the mean loss: the update is GPipe's and the unsplit model's.
  """

  def __init__(self, stage_devices, num_micro_batches):
    super(OneFOneBSchedule, self).__init__(stage_devices, num_micro_batches)
    self._forward_ops = []  # per micro-batch, per stage, the ops its forward pass built

  def _stage_of(self, op):
    device = _canonical(op.device)
    return self.stage_devices.index(device) if device in self.stage_devices else None

  def _ops_by_stage(self, build_fn):
    """(build_fn()'s result, per stage the ops it created there)."""
    graph = tf.get_default_graph()
    first = len(graph.get_operations())
    result = build_fn()
    by_stage = [[] for _ in self.stage_devices]
    for op in graph.get_operations()[first:]:  # In creation order: the new ones last.
      stage = self._stage_of(op)
      if stage is not None:
        by_stage[stage].append(op)
    return result, by_stage

  def forward(self, micro_batch, build_fn):
    result, by_stage = self._ops_by_stage(build_fn)
    self._forward_ops.append(by_stage)
    return result

  def gradients(self, losses, variables, loss_scale=None):
    stages, micro = len(self.stage_devices), len(losses)
    scale = 1.0 / micro
    per_micro, backward_ops = [], []
    for m, loss in enumerate(losses):
      with tf.device(self.stage_devices[-1]), tf.name_scope("micro_%d_loss" % m):
        scaled = loss * scale if loss_scale is None else (
            loss * tf.cast(loss_scale * scale, loss.dtype))
      grads, by_stage = self._ops_by_stage(
          lambda scaled=scaled: tf.gradients(scaled, variables,
                                             colocate_gradients_with_ops=True))
      per_micro.append(grads)
      backward_ops.append(by_stage)
    for s in range(stages):
      in_flight = stages - s
      for m in range(in_flight, micro):
        _wait_for(self._forward_ops[m][s], backward_ops[m - in_flight][s],
                  self.stage_devices[s], "1f1b_stage_%d_micro_%d" % (s, m))
    return [_sum_in_order(grads) for grads in zip(*per_micro)]


def _wait_for(forward_ops, backward_ops, device, name):
  """Makes the entry ops of a forward subgraph wait for every op of a backward subgraph."""
  if not backward_ops or not forward_ops:
    return
  with tf.device(device), tf.control_dependencies(backward_ops):
    done = tf.no_op(name=name)
  inside = set(forward_ops)
  for op in forward_ops:
    if not any(tensor.op in inside for tensor in op.inputs):
      op._add_control_input(done)  # pylint: disable=protected-access


def _sum_in_order(grads):
  """One variable's gradients of the micro-batches summed in order, a running sum."""
  grads = [g for g in grads if g is not None]
  if not grads:
    return None
  if any(isinstance(g, tf.IndexedSlices) for g in grads):
    return strategies.sum_gradients(grads)  # Sparse: the rows of all, concatenated.
  total = grads[0]
  for grad in grads[1:]:
    with tf.colocate_with(grad):
      total = tf.add(total, grad, name="micro_batch_gradient_sum")
  return total


SCHEDULES = {"gpipe": GPipeSchedule, "1f1b": OneFOneBSchedule}


def configure_session(schedule, config):
  """Adapts a session ConfigProto to `schedule`.

  1F1B: Grappler's arithmetic optimizer would turn each running sum of micro-batch gradients
  into one AddN of all M of them (AddOpsRewrite), keeping every micro-batch's weight gradients
  alive until the last backward pass; it is turned off (measured: M copies of the stage's
  weight gradients at the peak with it, one without).
  """
  if schedule == "1f1b":
    config.graph_options.rewrite_options.arithmetic_optimization = (
        rewriter_config_pb2.RewriterConfig.OFF)
  return config


def check_schedule(schedule, stages, num_micro_batches):
  """`schedule` if it is known and fits the stages, else InputError naming the flags."""
  if schedule not in SCHEDULES:
    raise InputError("--pipeline_schedule=%s: expected one of %s" %
                     (schedule, ", ".join(sorted(SCHEDULES))))
  if schedule == "1f1b" and num_micro_batches < stages:
    raise InputError("--pipeline_schedule=1f1b needs --num_micro_batches >= --pipeline_stages "
                     "(found --num_micro_batches=%d < --pipeline_stages=%d): every stage "
                     "keeps up to pipeline_stages micro-batches in flight" %
                     (num_micro_batches, stages))
  return schedule
