"""Activation recomputation (`--recompute=layer`): an encoder layer keeps only its input.

Without it, the backward pass of every encoder layer reads the activations its forward pass
made (the Q/K/V projections, the attention scores and probabilities [batch, heads, seq, seq],
the feed-forward layer's [batch*seq, intermediate] input and output, every dropout mask), so
the forward pass keeps all of them alive for all layers at once: at seq 512 the attention
probabilities alone are heads * seq^2 floats per example and layer. With `layer`, the forward
pass of each layer runs as usual but its inside is let go as soon as the next layer has read
the output; when the backward pass reaches the layer, its forward pass is built again from the
kept input (and the same weights and dropout masks) and differentiated right there. The cost is
one more forward pass of the encoder per step (about a third more compute); the gain is that at
most one layer's inside is alive at a time.

How, in graph mode (`LayerRecompute`, a runner for modeling.layer_runner_scope):
- the layer is built once for the forward pass, through a custom getter that records the
  variables it reads (stock names: the model creates them as without recomputation);
- its output goes through an IdentityN that also takes the layer's input and those variables'
  values, with a gradient of our own: TensorFlow's tf.gradients then never walks into the
  layer's inside (its output's gradient is None), and gets the input's and the variables'
  gradients from ours;
- our gradient waits for the output's gradient (a control edge: otherwise the executor would
  run the recomputation during the forward pass, when its inputs are ready, and gain nothing),
  builds the layer again from the input under a getter that hands back the recorded variables,
  and differentiates it with tf.gradients against the incoming gradient.
The same dropout masks come from modeling's seeded dropout: each layer draws its masks
statelessly from a per-layer seed made outside the layer, so the recomputed forward pass draws
exactly the masks of the first. The update therefore equals the update without recomputation
(tests/test_recompute.py, 1e-5), with towers, pipeline stages, accumulation and mixed precision
(the layer's casts are part of what is rebuilt).
"""

import collections
import itertools

import tensorflow.compat.v1 as tf

from core.errors import InputError

MODES = ("none", "layer")
_GRADIENT_NAMES = itertools.count()


def check_mode(mode):
  """`mode` if it is one of MODES, else InputError naming --recompute."""
  if mode not in MODES:
    raise InputError("--recompute=%s: expected one of %s" % (mode, ", ".join(MODES)))
  return mode


def layer_runner(mode):
  """The runner of modeling.layer_runner_scope for `mode` (None for "none")."""
  return LayerRecompute() if check_mode(mode) == "layer" else None


class LayerRecompute(object):
  """Builds an encoder layer whose inside is rebuilt during the backward pass."""

  def __call__(self, layer_fn, layer_input):
    """layer_fn(layer_input) -> output, built so that only layer_input is kept for backward.

    Args:
      layer_fn: callable(Tensor [rows, hidden]) -> Tensor [rows, hidden]; builds the layer in
        the current variable scope; building it twice builds the same math.
      layer_input: float Tensor [rows, hidden].

    Returns:
      The layer's output [rows, hidden], whose gradient is computed by recomputation.
    """
    scope = tf.get_variable_scope()
    variables = collections.OrderedDict()

    def recording_getter(getter, name, *args, **kwargs):
      variables[name] = getter(name, *args, **kwargs)
      return variables[name]

    with tf.variable_scope(scope, custom_getter=recording_getter, auxiliary_name_scope=False):
      output = layer_fn(layer_input)
    weights = list(variables.values())

    def replay_getter(getter, name, *args, **kwargs):
      del getter, args, kwargs
      return variables[name]

    def recompute_gradient(op, output_grad, *unused_grads):
      """[None, input gradient, variable gradients...] for the IdentityN's inputs."""
      del op, unused_grads
      with tf.control_dependencies([output_grad]):
        kept_input = tf.identity(layer_input, name="recompute_input")
      with tf.name_scope("recompute"), tf.variable_scope(
          scope, reuse=True, custom_getter=replay_getter, auxiliary_name_scope=False):
        replayed = layer_fn(kept_input)
      grads = tf.gradients(replayed, [kept_input] + weights, grad_ys=output_grad,
                           colocate_gradients_with_ops=True)
      return [None] + grads

    name = "BertLayerRecompute_%d" % next(_GRADIENT_NAMES)
    tf.RegisterGradient(name)(recompute_gradient)
    with tf.get_default_graph().gradient_override_map({"IdentityN": name}):
      outputs = tf.identity_n([output, layer_input] + [tf.convert_to_tensor(w) for w in weights],
                              name="recompute_boundary")
    return outputs[0]
