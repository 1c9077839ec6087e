"""Adam with decoupled weight decay and BERT's learning-rate schedule (stock public API).

`create_optimizer(loss, ...)` is stock google-research/bert: gradients of one loss, clipped to a
global norm of 1.0, applied with `AdamWeightDecayOptimizer` under linear warm-up then linear decay.
`create_train_op_from_grads(grads_and_vars, ...)` is the same update for gradients that the towers
have already averaged (see tower_utils.py). Both create the stock slot variables
`<var>/adam_m` and `<var>/adam_v` and increment `global_step`, so checkpoints match stock BERT.

`create_replicated_train_op` applies the same update to every replica of the variables
(tower_utils' allreduce mode), with `optimizer="lamb"` for LAMB (same slots) and an optional
`DynamicLossScale` for float16 training, which skips updates whose gradients are not finite.

Layer-wise learning-rate decay (`layerwise_lr_decay=D` < 1, ELECTRA's fine-tuning recipe): with L
transformer layers, `encoder/layer_k/` (k = 0..L-1) is updated at lr * D^(L-k), the embeddings
at lr * D^(L+1), everything else (the pooler, task heads) at lr; see `layerwise_lr_factors`.

Holding variables still (`hold=Hold(names, until_step)`, head first): the named variables (e.g. an
encoder restored from a checkpoint, while a new head learns on top of it) do not move during the
first `until_step` = H updates: their gradients are zeroed before clipping (so the global norm is
the new part's, and their Adam moments stay zero) and their learning rate is 0. The schedule has
two phases then (`learning_rate_schedule(..., restart_at=H)`): the new part warms up over
min(H, num_warmup_steps) updates and stays at the peak until update H; from update H + 1 on
everything trains under the stock schedule restarted, warm-up over num_warmup_steps then linear
decay to 0 at num_train_steps, so the restored weights get a whole warm-up and decay (their
Adam moments start from zero then, as a new run's do).
"""

import collections

import re

from absl import logging
import tensorflow.compat.v1 as tf
from tensorflow.python.ops import gen_training_ops  # pylint: disable=g-direct-tensorflow-import

CLIP_NORM = 1.0


def learning_rate_at(step, learning_rate, num_train_steps, num_warmup_steps, restart_at=0):
  """learning_rate_schedule's value at `step`, in Python (for messages)."""
  if restart_at and step < restart_at:
    head_warmup = min(num_warmup_steps or 0, restart_at)
    return learning_rate * min(1.0, step / float(head_warmup)) if head_warmup else learning_rate
  if restart_at:
    return learning_rate_at(step - restart_at, learning_rate, num_train_steps - restart_at,
                            num_warmup_steps)
  if num_warmup_steps and step < num_warmup_steps:
    return learning_rate * step / float(num_warmup_steps)
  return learning_rate * (1.0 - min(step, max(1, num_train_steps)) / float(max(1, num_train_steps)))


def learning_rate_schedule(init_lr, global_step, num_train_steps, num_warmup_steps, restart_at=0):
  """Linear warm-up from 0 to `init_lr` over `num_warmup_steps`, then linear decay to 0.

  With restart_at = H > 0 (head first, see Hold): two phases. Updates 1..H warm up over
  min(H, num_warmup_steps) and then stay at init_lr; from update H + 1 the schedule above starts
  again at 0, over the num_train_steps - H updates left.

  Args:
    init_lr: peak learning rate (Python float).
    global_step: int64 scalar Variable, the number of updates applied so far.
    num_train_steps: step at which the rate reaches 0.
    num_warmup_steps: steps of linear warm-up (0 or None for none).
    restart_at: H, the step at which the schedule starts again (0: one phase, stock).

  Returns:
    float32 scalar Tensor, the learning rate for the update at `global_step`.
  """
  if restart_at:
    step = tf.cast(global_step, tf.float32)
    head_warmup = min(num_warmup_steps or 0, restart_at)
    first = init_lr * tf.minimum(1.0, step / float(head_warmup)) if head_warmup else init_lr
    second = learning_rate_schedule(init_lr, tf.maximum(global_step - restart_at, 0),
                                    num_train_steps - restart_at, num_warmup_steps)
    return tf.where(step < float(restart_at), first, second)
  scheduled_learning_rate = tf.constant(value=init_lr, shape=[], dtype=tf.float32)
  scheduled_learning_rate = tf.train.polynomial_decay(
      scheduled_learning_rate, global_step, max(1, num_train_steps), end_learning_rate=0.0,
      power=1.0, cycle=False)

  if num_warmup_steps:
    global_steps_int = tf.cast(global_step, tf.int32)
    warmup_steps_int = tf.constant(num_warmup_steps, dtype=tf.int32)
    global_steps_float = tf.cast(global_steps_int, tf.float32)
    warmup_steps_float = tf.cast(warmup_steps_int, tf.float32)
    warmup_learning_rate = init_lr * (global_steps_float / warmup_steps_float)
    is_warmup = tf.cast(global_steps_int < warmup_steps_int, tf.float32)
    scheduled_learning_rate = ((1.0 - is_warmup) * scheduled_learning_rate +
                               is_warmup * warmup_learning_rate)
  return scheduled_learning_rate


def global_norm(grads):
  """The global norm of `grads`, each IndexedSlices counted as the dense gradient it stands for.

  An embedding's gradient is an IndexedSlices with one row per token of the batch, so a token
  seen k times has k rows, which the dense gradient sums. tf.global_norm (and so stock BERT's
  tf.clip_by_global_norm) squares the rows apart, which misstates the norm: [CLS] alone is in
  every row of the batch. Here the rows of each index are summed first, as the dense gradient
  (and torch's clip_grad_norm_) has them; the slices stay sparse.

  Each gradient's square sum is taken on the gradient's own device (colocated with it), so only
  scalars travel; the sum of the scalars is taken next to the first one. With towers or pipeline
  stages the gradients live on several devices: a norm built under no device would copy every
  gradient to the first GPU (TensorFlow's placer puts an op without a device there).

  Args:
    grads: list of gradient Tensors and IndexedSlices (no None).

  Returns:
    float32 scalar Tensor.
  """
  half_squares = []
  for grad in grads:
    with tf.colocate_with(grad.values if isinstance(grad, tf.IndexedSlices) else grad):
      if isinstance(grad, tf.IndexedSlices):
        rows, position = tf.unique(grad.indices)
        grad = tf.math.unsorted_segment_sum(grad.values, position, tf.shape(rows)[0])
      # L2Loss (sum(g^2) / 2), as tf.global_norm: one pass over the gradient, where Square then
      # Sum make a gradient-size temporary and read it again.
      half_squares.append(tf.nn.l2_loss(tf.cast(grad, tf.float32)))
  with tf.colocate_with(half_squares[0]):
    return tf.sqrt(2.0 * tf.add_n(half_squares))


def create_optimizer(loss, init_lr, num_train_steps, num_warmup_steps, use_tpu=False,
                     layerwise_lr_decay=1.0):
  """Stock entry: the train op for one `loss` (one tower). `use_tpu` is accepted and ignored."""
  del use_tpu  # No TPU support; kept so stock call sites work unchanged.
  tvars = tf.trainable_variables()
  grads = tf.gradients(loss, tvars)
  train_op, _ = create_train_op_from_grads(
      list(zip(grads, tvars)), init_lr, num_train_steps, num_warmup_steps,
      layerwise_lr_decay=layerwise_lr_decay)
  return train_op


_LAYER = re.compile(r"(?:^|/)encoder/layer_(\d+)/")
_EMBEDDINGS = re.compile(r"(?:^|/)embeddings(?:_project)?/")


def layerwise_lr_factors(variable_names, decay):
  """Each variable's learning-rate factor under layer-wise decay (ELECTRA's fine-tuning).

  With L transformer layers (`.../encoder/layer_0/` to `layer_{L-1}/` among the names): layer k
  gets decay^(L-k), the embeddings (`.../embeddings/`) decay^(L+1), every other variable (the
  pooler, the task head) 1.0. The layers nearest the input move least. (google-research/
  electra's _get_layer_lrs puts its head one depth above the top layer, so its factors are
  these times one more `decay` everywhere but the head.)

  Args:
    variable_names: variable names (op names, or with ":0"); replica copies
      (`replica_r/<name>`) get the factor of their stock name.
    decay: D in (0, 1]; 1.0 gives every variable 1.0.

  Returns:
    dict name -> float factor, one entry per name.
  """
  names = list(variable_names)
  layers = [int(m.group(1)) for m in map(_LAYER.search, names) if m]
  num_layers = max(layers) + 1 if layers else 0
  factors = {}
  for name in names:
    layer = _LAYER.search(name)
    if layer:
      depth = int(layer.group(1)) + 1
    elif _EMBEDDINGS.search(name):
      depth = 0
    else:
      depth = num_layers + 1
    factors[name] = float(decay) ** (num_layers + 1 - depth)
  return factors


def _log_layer_factors(factors, decay):
  """Logs the distinct factors of layer-wise decay with an example variable of each."""
  by_factor = {}
  for name, factor in sorted(factors.items()):
    by_factor.setdefault(factor, name)
  logging.info("Layer-wise learning-rate decay %g: %s", decay, "; ".join(
      "x%.4g (%s)" % (factor, name) for factor, name in sorted(by_factor.items())))


OPTIMIZERS = ("adamw", "lamb")  # --optimizer; both keep the slots of SLOT_SUFFIXES
# The suffixes of a variable's Adam slots (`<var>/adam_m`, `<var>/adam_v`), as in Google's
# checkpoints: what an export or a conversion leaves out to keep the model weights only.
SLOT_SUFFIXES = ("/adam_m", "/adam_v")


class Hold(collections.namedtuple("Hold", ["names", "until_step"])):
  """Variables (by stock name) that stay still for the first `until_step` updates."""


def _hold_still(replica_grads_and_vars, hold, global_step, lr_factors):
  """Zeroes the held variables' gradients while they are held; adds their rate factors.

  Args:
    replica_grads_and_vars: list (one per replica) of lists of (gradient or None, Variable),
      aligned with replica 0's, whose variables carry the stock names.
    hold: Hold.
    global_step: as in create_replicated_train_op.
    lr_factors: None or dict variable name -> float factor (layer-wise decay).

  Returns:
    (replica_grads_and_vars with gated gradients, dict variable name -> factor (float or Tensor)).
  """
  names = set(hold.names)
  held = [v.op.name in names for _, v in replica_grads_and_vars[0]]
  moving = tf.cast(global_step >= hold.until_step, tf.float32)  # 0.0 while held
  factors = dict(lr_factors or {})
  gated = []
  for grads_and_vars in replica_grads_and_vars:
    replica = []
    for is_held, (grad, var) in zip(held, grads_and_vars):
      if is_held and grad is not None:
        with tf.colocate_with(var):
          if isinstance(grad, tf.IndexedSlices):
            grad = tf.IndexedSlices(grad.values * tf.cast(moving, grad.values.dtype),
                                    grad.indices, grad.dense_shape)
          else:
            grad = grad * tf.cast(moving, grad.dtype)
        factors[var.op.name] = moving * factors.get(var.op.name, 1.0)
      replica.append((grad, var))
    gated.append(replica)
  return gated, factors


def _layer_factors(replica_grads_and_vars, layerwise_lr_decay):
  """layerwise_lr_factors of every replica's variables (logged), or None for decay 1.0."""
  if layerwise_lr_decay == 1.0:
    return None
  factors = layerwise_lr_factors(
      [v.op.name for grads_and_vars in replica_grads_and_vars for _, v in grads_and_vars],
      layerwise_lr_decay)
  _log_layer_factors(factors, layerwise_lr_decay)
  return factors


def create_train_op_from_grads(grads_and_vars, init_lr, num_train_steps, num_warmup_steps,
                               global_step=None, clip_norm=CLIP_NORM, optimizer="adamw",
                               loss_scale=None, layerwise_lr_decay=1.0, hold=None):
  """The BERT update for gradients already computed (and, with towers, already averaged).

  Args:
    grads_and_vars: list of (gradient Tensor or IndexedSlices or None, Variable).
    init_lr: peak learning rate.
    num_train_steps: total number of updates (the decay reaches 0 there).
    num_warmup_steps: number of warm-up updates.
    global_step: int64 Variable; defaults to tf.train.get_or_create_global_step().
    clip_norm: gradients are clipped to this global norm before the update.
    optimizer: "adamw" (stock) or "lamb".
    loss_scale: optional DynamicLossScale (the gradients are already unscaled).
    layerwise_lr_decay: D < 1 scales each variable's learning rate by its
      layerwise_lr_factors (1.0: one rate for all, stock).
    hold: optional Hold: variables that stay still for its first until_step updates; the
      schedule restarts after them (learning_rate_schedule's restart_at).

  Returns:
    (train_op, scheduled_learning_rate): the op applying one update and incrementing global_step
    (its value is global_step afterwards), and the scalar Tensor of the schedule used by it (the
    rate of the head; decayed layers get a fraction of it).
  """
  return create_replicated_train_op([grads_and_vars], init_lr, num_train_steps,
                                    num_warmup_steps, global_step, clip_norm, optimizer,
                                    loss_scale, layerwise_lr_decay, hold)


def create_replicated_train_op(replica_grads_and_vars, init_lr, num_train_steps,
                               num_warmup_steps, global_step=None, clip_norm=CLIP_NORM,
                               optimizer="adamw", loss_scale=None, layerwise_lr_decay=1.0,
                               hold=None):
  """One update applied to each replica of the variables, from its own copy of the gradients.

  Every replica's gradients are identical (reduced by tower_utils), and so are its variables, so
  each replica is clipped by its own global norm (the same number) and updated alike.

  Args:
    replica_grads_and_vars: list (one per replica) of lists of (gradient or None, Variable).
    init_lr, num_train_steps, num_warmup_steps, global_step, clip_norm, optimizer,
      layerwise_lr_decay, hold: see create_train_op_from_grads.
    loss_scale: optional DynamicLossScale. The update (all replicas) and the global_step
      increment then run only when replica 0's gradients are all finite; otherwise the step is
      skipped, global_step does not advance, and the scale is lowered.

  Returns:
    (train_op, scheduled_learning_rate), as create_train_op_from_grads.
  """
  if global_step is None:
    global_step = tf.train.get_or_create_global_step()
  restart_at = hold.until_step if hold is not None else 0
  with tf.colocate_with(global_step):  # Scalars next to the step counter (the host's CPU).
    scheduled_learning_rate = learning_rate_schedule(init_lr, global_step, num_train_steps,
                                                     num_warmup_steps, restart_at)
  lr_factors = _layer_factors(replica_grads_and_vars, layerwise_lr_decay)
  if restart_at:
    replica_grads_and_vars, lr_factors = _hold_still(replica_grads_and_vars, hold, global_step,
                                                     lr_factors)
  opt = make_optimizer(optimizer, scheduled_learning_rate, lr_factors)

  clipped, norms = [], []
  for grads_and_vars in replica_grads_and_vars:
    grads_and_vars = [(g, v) for (g, v) in grads_and_vars if g is not None]
    # The clipping scale (scalars) next to the replica's first variable; each gradient is scaled
    # where it is (clip_by_global_norm colocates), never on a device of its own choosing.
    with tf.device(grads_and_vars[0][1].device):
      grads = [g for g, _ in grads_and_vars]
      grads, norm = tf.clip_by_global_norm(grads, clip_norm=clip_norm, use_norm=global_norm(grads))
    clipped.extend(zip(grads, [v for _, v in grads_and_vars]))
    norms.append(norm)
  opt.create_slots([v for _, v in clipped])

  def apply_and_count():
    apply_op = opt.apply_gradients(clipped, global_step=global_step)
    # Like stock BERT, AdamWeightDecayOptimizer does not touch global_step; the increment is
    # here. Unlike stock (a plain tf.group), it waits for the update: otherwise the update may
    # read the learning rate of the next step, at random.
    with tf.control_dependencies([apply_op]), tf.colocate_with(global_step):
      return tf.identity(global_step.assign_add(1))

  if loss_scale is None:
    return apply_and_count(), scheduled_learning_rate
  # A non-finite gradient anywhere makes replica 0's global norm non-finite (the replicas agree).
  with tf.colocate_with(norms[0]):
    finite = tf.is_finite(norms[0])
  with tf.colocate_with(global_step):
    new_step = tf.cond(finite, apply_and_count, lambda: tf.identity(global_step))
    with tf.control_dependencies([loss_scale.update(finite, after=new_step)]):
      return tf.identity(new_step), scheduled_learning_rate


def make_optimizer(name, scheduled_learning_rate, lr_factors=None):
  """The optimizer `name` ("adamw" or "lamb") with BERT's hyper-parameters, at the rate of the
  schedule (the optimizers keep the stock argument name `learning_rate`).

  lr_factors: optional dict variable name -> learning-rate factor (layerwise_lr_factors).
  """
  kwargs = dict(learning_rate=scheduled_learning_rate, weight_decay_rate=0.01, beta_1=0.9,
                beta_2=0.999, epsilon=1e-6,
                exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"],
                lr_factors=lr_factors)
  if name == "adamw":
    return AdamWeightDecayOptimizer(**kwargs)
  if name == "lamb":
    return LambOptimizer(**kwargs)
  raise ValueError("unknown optimizer %r: expected one of %s" % (name, ", ".join(OPTIMIZERS)))


class DynamicLossScale(object):
  """Dynamic loss scaling for float16 training.

  The loss is multiplied by `scale` before differentiation (so small float16 gradients do not
  flush to zero) and the gradients divided by it afterwards. A step whose gradients are not all
  finite is skipped (no variable changes, global_step does not advance, so num_train_steps still
  counts applied updates) and the scale halves, down to `min_scale`; after `growth_interval`
  finite steps in a row it doubles. The two variables are local, not saved: checkpoints stay
  stock, and a resumed run starts again from `initial_scale` and settles within a few skipped
  steps.
  """

  def __init__(self, initial_scale=2.0 ** 15, growth_interval=2000, min_scale=1.0):
    self._growth_interval = growth_interval
    self._min_scale = min_scale
    with tf.variable_scope("loss_scale"):
      self._scale = tf.Variable(float(initial_scale), trainable=False, use_resource=True,
                                collections=[tf.GraphKeys.LOCAL_VARIABLES], name="scale")
      self._good_steps = tf.Variable(0, trainable=False, use_resource=True,
                                     collections=[tf.GraphKeys.LOCAL_VARIABLES],
                                     name="good_steps")
      # One read per step, shared by the towers and by `update`.
      self.scale = self._scale.read_value()

  def update(self, finite, after):
    """The op adjusting the scale for the step whose gradients were `finite`, run after `after`.

    Args:
      finite: bool scalar Tensor, whether every gradient was finite.
      after: Tensor or op (the update) the adjustment must follow.
    """
    with tf.control_dependencies([after]):
      good = tf.where(finite, self._good_steps.read_value() + 1, 0)
      grow = good >= self._growth_interval
      scale = tf.where(finite, tf.where(grow, self.scale * 2.0, self.scale),
                       tf.maximum(self.scale * 0.5, self._min_scale))
      return tf.group(self._scale.assign(scale), self._good_steps.assign(
          tf.where(grow, 0, good)))


class AdamWeightDecayOptimizer(tf.train.Optimizer):
  """Adam with decoupled L2 weight decay and no bias correction, as in BERT.

  Slots are plain variables named `<var>/adam_m` and `<var>/adam_v`, created next to their
  variable (same device), exactly as in Google's checkpoints.
  """

  def __init__(self,
               learning_rate,
               weight_decay_rate=0.0,
               beta_1=0.9,
               beta_2=0.999,
               epsilon=1e-6,
               exclude_from_weight_decay=None,
               name="AdamWeightDecayOptimizer",
               lr_factors=None):
    """Constructs an AdamWeightDecayOptimizer.

    lr_factors: optional dict variable name -> factor of `learning_rate` for that variable
      (layer-wise decay: a float; a held variable: a scalar Tensor); a variable not in it gets
      the factor 1.
    """
    super(AdamWeightDecayOptimizer, self).__init__(False, name)
    self.lr_factors = lr_factors or {}

    self.learning_rate = learning_rate
    self.weight_decay_rate = weight_decay_rate
    self.beta_1 = beta_1
    self.beta_2 = beta_2
    self.epsilon = epsilon
    self.exclude_from_weight_decay = exclude_from_weight_decay
    self._slot_cache = {}  # variable name -> (adam_m, adam_v)

  def _learning_rate(self, param_name):
    """The learning rate of `param_name`: learning_rate times its layer-wise factor."""
    factor = self.lr_factors.get(param_name, 1.0)
    if isinstance(factor, float) and factor == 1.0:
      return self.learning_rate
    return self.learning_rate * factor

  def create_slots(self, var_list):
    """Creates the adam_m and adam_v slots of every variable, next to it (same device).

    apply_gradients creates missing ones itself; call this first when the update is built
    inside a tf.cond, where variables cannot be created.
    """
    for param in var_list:
      self._get_slots(param)

  def _get_slots(self, param):
    """(m, v) of `param`: float32 zeros named <param>/adam_m and <param>/adam_v."""
    param_name = self._get_variable_name(param.name)
    if param_name not in self._slot_cache:
      with tf.device(param.device):
        self._slot_cache[param_name] = tuple(
            tf.get_variable(name=param_name + suffix, shape=param.shape.as_list(),
                            dtype=tf.float32, trainable=False,
                            initializer=tf.zeros_initializer())
            for suffix in SLOT_SUFFIXES)
    return self._slot_cache[param_name]

  def apply_gradients(self, grads_and_vars, global_step=None, name=None):
    """Applies one Adam step to each (grad, var); does not increment `global_step`.

    The updates of sparse gradients (embedding tables) run after all the others: each makes a
    full-size dense gradient on the table's device, which then meets no activation or gradient
    of the backward pass still held there (the peak of the device that owns the word
    embeddings, measured in docs/results/memory.md).
    """
    del global_step  # Incremented by the caller, as in stock BERT.
    present = [(g, p) for (g, p) in grads_and_vars if g is not None and p is not None]
    dense = [(g, p) for (g, p) in present if not isinstance(g, tf.IndexedSlices)]
    sparse = [(g, p) for (g, p) in present if isinstance(g, tf.IndexedSlices)]
    updates = [self._apply_on_device(g, p) for (g, p) in dense]
    with tf.control_dependencies(updates if sparse else []):
      updates += [self._apply_on_device(g, p) for (g, p) in sparse]
    return tf.group(*updates, name=name)

  def _apply_on_device(self, grad, param):
    m, v = self._get_slots(param)
    with tf.device(param.device):
      return self._apply_one(self._get_variable_name(param.name), param, m, v, grad)

  def _apply_one(self, param_name, param, m, v, grad):
    """BERT's AdamW step of one variable, as one fused ApplyAdam kernel.

    ApplyAdam with both beta powers 0 is exactly Adam without bias correction:
    m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2, param -= lr m / (sqrt(v) + epsilon). The
    decoupled weight decay lr * wd * param is subtracted just before (`_decay`), from the same
    old value, so the result is BERT's param - lr (m / (sqrt(v) + epsilon) + wd param). One pass
    over param, m and v instead of about fifteen element-wise ops, which matters most for the
    large embedding tables and on CPUs.

    A sparse gradient (tf.IndexedSlices: an embedding table's rows, [rows, width] values) is
    made dense only after the decay, so the table's two full-size temporaries (lr * wd * param
    and the dense gradient) never coexist on the device that owns it.
    """
    decay = []
    # Decoupled weight decay: added to the update, not to the loss, so it does not interact
    # with Adam's m and v (see "Decoupled Weight Decay Regularization").
    if self._do_use_weight_decay(param_name):
      # Both updates work in place, so they must wait for the gradient (the clipped one depends
      # on every gradient, hence on every read of every variable in the towers).
      with tf.control_dependencies(_tensors_of(grad)):
        decay = [self._decay(param, self._learning_rate(param_name) * self.weight_decay_rate)]
    with tf.control_dependencies(decay):
      grad = tf.convert_to_tensor(grad)  # Sparse embedding gradients become dense here.
      args = (0.0, 0.0, self._learning_rate(param_name), self.beta_1, self.beta_2, self.epsilon,
              grad)
      if hasattr(param, "handle"):  # resource variables
        return gen_training_ops.resource_apply_adam(param.handle, m.handle, v.handle, *args)
      return gen_training_ops.apply_adam(param, m, v, *args)

  @staticmethod
  def _decay(param, rate):
    """param -= rate * param, in place; `rate` is a float32 scalar Tensor (lr * weight decay).

    A ref variable (what the run scripts train) is decayed by one ApplyGradientDescent with
    param as its own gradient: one read and one write of param, where assign_sub of
    rate * param also writes and reads a param-size temporary. The result may differ from
    assign_sub's in the last bit (one rounding where the CPU fuses the multiply-subtract).
    """
    if hasattr(param, "handle"):  # resource variables: an in-place kernel would copy first
      return param.assign_sub(rate * param)
    return gen_training_ops.apply_gradient_descent(param, rate, param)

  def _do_use_weight_decay(self, param_name):
    """Whether to apply weight decay to `param_name` (not to LayerNorm or bias)."""
    if not self.weight_decay_rate:
      return False
    if self.exclude_from_weight_decay:
      for r in self.exclude_from_weight_decay:
        if re.search(r, param_name) is not None:
          return False
    return True

  def _get_variable_name(self, param_name):
    """The variable name without its ":0" suffix."""
    m = re.match("^(.*):\\d+$", param_name)
    if m is not None:
      param_name = m.group(1)
    return param_name

  # tf.train.Optimizer's abstract hooks are unused: apply_gradients is overridden whole.
  def _apply_dense(self, grad, var):
    raise NotImplementedError("use apply_gradients")

  def _resource_apply_dense(self, grad, handle):
    raise NotImplementedError("use apply_gradients")

  def _resource_apply_sparse(self, grad, handle, indices):
    raise NotImplementedError("use apply_gradients")

  def _apply_sparse(self, grad, var):
    raise NotImplementedError("use apply_gradients")


def _tensors_of(grad):
  """The tensors a gradient is made of: [grad], or a tf.IndexedSlices' values and indices."""
  if isinstance(grad, tf.IndexedSlices):
    return [grad.values, grad.indices]
  return [grad]


class LambOptimizer(AdamWeightDecayOptimizer):
  """LAMB ("Large Batch Optimization for Deep Learning", You et al., 2019) for very large batches.

  The AdamW update of each variable (no bias correction, decoupled weight decay, as above) is
  rescaled by its trust ratio ||param|| / ||update|| (1 when either norm is 0), as in the LAMB
  of google-research/albert. Variables matching `exclude_from_layer_adaptation` (by default those
  excluded from weight decay: LayerNorm and biases) keep the plain AdamW update. The slots are the
  same `adam_m` / `adam_v`, so checkpoints are interchangeable with AdamW ones.
  """

  def __init__(self, learning_rate, weight_decay_rate=0.0, beta_1=0.9, beta_2=0.999,
               epsilon=1e-6, exclude_from_weight_decay=None, exclude_from_layer_adaptation=None,
               name="LambOptimizer", lr_factors=None):
    super(LambOptimizer, self).__init__(learning_rate, weight_decay_rate, beta_1, beta_2,
                                        epsilon, exclude_from_weight_decay, name, lr_factors)
    if exclude_from_layer_adaptation is None:
      exclude_from_layer_adaptation = exclude_from_weight_decay
    self.exclude_from_layer_adaptation = exclude_from_layer_adaptation

  def _apply_one(self, param_name, param, m, v, grad):
    """One LAMB step: the AdamW update, times the trust ratio, element-wise ops."""
    grad = tf.convert_to_tensor(grad)
    next_m = tf.multiply(self.beta_1, m) + tf.multiply(1.0 - self.beta_1, grad)
    next_v = tf.multiply(self.beta_2, v) + tf.multiply(1.0 - self.beta_2, tf.square(grad))
    update = next_m / (tf.sqrt(next_v) + self.epsilon)
    if self._do_use_weight_decay(param_name):
      update += self.weight_decay_rate * param
    if self._do_layer_adaptation(param_name):
      w_norm = tf.norm(param, ord=2)
      u_norm = tf.norm(update, ord=2)
      update *= tf.where(w_norm > 0.0, tf.where(u_norm > 0.0, w_norm / u_norm, 1.0), 1.0)
    next_param = param - self._learning_rate(param_name) * update
    return tf.group(param.assign(next_param), m.assign(next_m), v.assign(next_v))

  def _do_layer_adaptation(self, param_name):
    """Whether `param_name` gets the trust ratio (not LayerNorm or bias, by default)."""
    for r in self.exclude_from_layer_adaptation or []:
      if re.search(r, param_name) is not None:
        return False
    return True
