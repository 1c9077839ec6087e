"""Adam with decoupled weight decay and BERT's learning-rate schedule (stock public API).

`create_optimizer(loss, ...)` is stock google-research/bert: gradients of one loss, clipped to a
global norm of 1.0, applied with `AdamWeightDecayOptimizer` under linear warm-up then linear decay.
`create_train_op_from_grads(grads_and_vars, ...)` is the same update for gradients that the towers
have already averaged (see tower_utils.py). Both create the stock slot variables
`<var>/adam_m` and `<var>/adam_v` and increment `global_step`, so checkpoints match stock BERT.
"""

import re

import tensorflow.compat.v1 as tf

CLIP_NORM = 1.0


def learning_rate_schedule(init_lr, global_step, num_train_steps, num_warmup_steps):
  """Linear warm-up from 0 to `init_lr` over `num_warmup_steps`, then linear decay to 0.

  Args:
    init_lr: peak learning rate (Python float).
    global_step: int64 scalar Variable, the number of updates applied so far.
    num_train_steps: step at which the rate reaches 0.
    num_warmup_steps: steps of linear warm-up (0 or None for none).

  Returns:
    float32 scalar Tensor, the learning rate for the update at `global_step`.
  """
  learning_rate = tf.constant(value=init_lr, shape=[], dtype=tf.float32)
  learning_rate = tf.train.polynomial_decay(
      learning_rate, global_step, max(1, num_train_steps), end_learning_rate=0.0, power=1.0,
      cycle=False)

  if num_warmup_steps:
    global_steps_int = tf.cast(global_step, tf.int32)
    warmup_steps_int = tf.constant(num_warmup_steps, dtype=tf.int32)
    global_steps_float = tf.cast(global_steps_int, tf.float32)
    warmup_steps_float = tf.cast(warmup_steps_int, tf.float32)
    warmup_learning_rate = init_lr * (global_steps_float / warmup_steps_float)
    is_warmup = tf.cast(global_steps_int < warmup_steps_int, tf.float32)
    learning_rate = (1.0 - is_warmup) * learning_rate + is_warmup * warmup_learning_rate
  return learning_rate


def create_optimizer(loss, init_lr, num_train_steps, num_warmup_steps, use_tpu=False):
  """Stock entry: the train op for one `loss` (one tower). `use_tpu` is accepted and ignored."""
  del use_tpu  # No TPU support; kept so stock call sites work unchanged.
  tvars = tf.trainable_variables()
  grads = tf.gradients(loss, tvars)
  train_op, _ = create_train_op_from_grads(
      list(zip(grads, tvars)), init_lr, num_train_steps, num_warmup_steps)
  return train_op


def create_train_op_from_grads(grads_and_vars, init_lr, num_train_steps, num_warmup_steps,
                               global_step=None, clip_norm=CLIP_NORM):
  """The BERT update for gradients already computed (and, with towers, already averaged).

  Args:
    grads_and_vars: list of (gradient Tensor or IndexedSlices or None, Variable).
    init_lr: peak learning rate.
    num_train_steps: total number of updates (the decay reaches 0 there).
    num_warmup_steps: number of warm-up updates.
    global_step: int64 Variable; defaults to tf.train.get_or_create_global_step().
    clip_norm: gradients are clipped to this global norm before the update.

  Returns:
    (train_op, learning_rate): the op applying one update and incrementing global_step, and the
    scalar learning-rate Tensor used by it (for logging).
  """
  if global_step is None:
    global_step = tf.train.get_or_create_global_step()
  learning_rate = learning_rate_schedule(init_lr, global_step, num_train_steps, num_warmup_steps)

  optimizer = AdamWeightDecayOptimizer(
      learning_rate=learning_rate,
      weight_decay_rate=0.01,
      beta_1=0.9,
      beta_2=0.999,
      epsilon=1e-6,
      exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"])

  grads_and_vars = [(g, v) for (g, v) in grads_and_vars if g is not None]
  grads = [g for (g, _) in grads_and_vars]
  tvars = [v for (_, v) in grads_and_vars]
  (grads, _) = tf.clip_by_global_norm(grads, clip_norm=clip_norm)

  apply_op = optimizer.apply_gradients(list(zip(grads, tvars)), global_step=global_step)
  # Like stock BERT, AdamWeightDecayOptimizer does not touch global_step; the increment is here.
  # Unlike stock (a plain tf.group), it waits for the update: otherwise the update may read the
  # learning rate of the next step, at random.
  with tf.control_dependencies([apply_op]):
    train_op = global_step.assign_add(1)
  return train_op, learning_rate


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
               name="AdamWeightDecayOptimizer"):
    """Constructs an AdamWeightDecayOptimizer."""
    super(AdamWeightDecayOptimizer, self).__init__(False, name)

    self.learning_rate = learning_rate
    self.weight_decay_rate = weight_decay_rate
    self.beta_1 = beta_1
    self.beta_2 = beta_2
    self.epsilon = epsilon
    self.exclude_from_weight_decay = exclude_from_weight_decay

  def apply_gradients(self, grads_and_vars, global_step=None, name=None):
    """Applies one Adam step to each (grad, var); does not increment `global_step`."""
    del global_step  # Incremented by the caller, as in stock BERT.
    assignments = []
    for (grad, param) in grads_and_vars:
      if grad is None or param is None:
        continue

      param_name = self._get_variable_name(param.name)
      with tf.device(param.device):
        # Sparse embedding gradients become dense here, on the variable's device.
        grad = tf.convert_to_tensor(grad)
        m = tf.get_variable(
            name=param_name + "/adam_m",
            shape=param.shape.as_list(),
            dtype=tf.float32,
            trainable=False,
            initializer=tf.zeros_initializer())
        v = tf.get_variable(
            name=param_name + "/adam_v",
            shape=param.shape.as_list(),
            dtype=tf.float32,
            trainable=False,
            initializer=tf.zeros_initializer())

        next_m = tf.multiply(self.beta_1, m) + tf.multiply(1.0 - self.beta_1, grad)
        next_v = tf.multiply(self.beta_2, v) + tf.multiply(1.0 - self.beta_2, tf.square(grad))
        update = next_m / (tf.sqrt(next_v) + self.epsilon)

        # Decoupled weight decay: added to the update, not to the loss, so it does not interact
        # with Adam's m and v (see "Decoupled Weight Decay Regularization").
        if self._do_use_weight_decay(param_name):
          update += self.weight_decay_rate * param

        update_with_lr = self.learning_rate * update
        next_param = param - update_with_lr

        assignments.extend([param.assign(next_param), m.assign(next_m), v.assign(next_v)])
    return tf.group(*assignments, name=name)

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
