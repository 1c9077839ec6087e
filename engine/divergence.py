"""Divergence: when a run's loss left its normal range, and which checkpoint is safe to resume.

A loss that becomes nan or inf is the end of a divergence, not its start. Updates before it
already drove the weights (and Adam's slots) far from anything useful while every value stayed
finite, and checkpoints saved then are ruined: a rerun that resumes from one diverges again,
whatever its learning rate. So the training loop shows every update to a `Watch`:

- An update is *abnormal* when its loss exceeds LOSS_FACTOR x the lowest smoothed loss of the
  run so far plus LOSS_MARGIN, or its gradient norm exceeds GRAD_FACTOR x the smoothed gradient
  norm (both smoothed as exponential averages over about 1/SMOOTHING updates of normal values).
- The *onset* is the first update of the current abnormal stretch; the stretch ends only after
  CALM_STEPS normal updates in a row, so a loss that jumps about while it diverges keeps its
  first onset.
- The loss of update k is computed with the weights after update k-1, so the checkpoint of step
  s is *safe* when s < onset - 1: the loss computed from its weights was still normal.

When the run diverges, the chief moves every checkpoint from the first unsafe one on into
output_dir/diverged-step-<N>/ (kept for inspection, never resumed), points the `checkpoint`
state file at the newest safe one, and records both in run_info.json. The advised rerun with a
lower --learning_rate then resumes from the safe checkpoint, or, with none, starts again from
--init_checkpoint, without the user deleting anything.
"""

import math

SMOOTHING = 0.1
LOSS_FACTOR = 3.0
LOSS_MARGIN = 1.0
GRAD_FACTOR = 100.0
CALM_STEPS = 10


class Watch(object):
  """Labels each update normal or abnormal from its loss and gradient norm (see the module)."""

  def __init__(self):
    self.onset = None  # First step of the current abnormal stretch, or None.
    self._loss = None  # Smoothed loss of the normal updates.
    self._lowest = None  # Lowest smoothed loss so far.
    self._grad = None  # Smoothed gradient norm of the normal updates.
    self._calm = 0

  def observe(self, step, loss, grad_norm=None):
    """Takes the loss and gradient norm of update `step`; returns whether it was abnormal."""
    abnormal = not math.isfinite(loss) or (grad_norm is not None and not math.isfinite(grad_norm))
    if not abnormal and self._lowest is not None:
      abnormal = loss > LOSS_FACTOR * self._lowest + LOSS_MARGIN
      if grad_norm is not None and self._grad:
        abnormal = abnormal or grad_norm > GRAD_FACTOR * self._grad
    if abnormal:
      if self.onset is None:
        self.onset = step
      self._calm = 0
      return True
    if self.onset is not None:
      self._calm += 1
      if self._calm >= CALM_STEPS:
        self.onset, self._calm = None, 0
    self._loss = loss if self._loss is None else self._loss + SMOOTHING * (loss - self._loss)
    self._lowest = self._loss if self._lowest is None else min(self._lowest, self._loss)
    if grad_norm is not None:
      self._grad = (grad_norm if self._grad is None else
                    self._grad + SMOOTHING * (grad_norm - self._grad))
    return False

  @property
  def lowest_loss(self):
    """The lowest smoothed loss of the normal updates so far (None before the first)."""
    return self._lowest

  def first_unsafe_step(self, diverged_step):
    """The lowest checkpoint step that may hold ruined weights, once the run diverged at
    `diverged_step` (its loss or weights stopped being finite)."""
    onset = self.onset if self.onset is not None else diverged_step
    return max(onset - 1, 0)
