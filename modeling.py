"""The BERT model, graph mode, with the public API and variable names of google-research/bert.

Every variable is created with `tf.get_variable`, under exactly the scope names of Google's
released checkpoints (`bert/embeddings/word_embeddings`,
`bert/encoder/layer_0/attention/self/query/kernel`, `.../LayerNorm/gamma`, `bert/pooler/dense/...`),
so a Google checkpoint restores with no conversion and checkpoints written here restore in stock
BERT. The math follows the released models: tanh-approximated GELU and layer norm with
epsilon 1e-12 over the hidden axis.

Building the model again inside a reusing variable scope (as every tower after the first does)
creates no new variable.

Mixed precision. Variables are always float32 (checkpoints keep stock names and dtypes). Under
`compute_dtype_scope(tf.float16)` (or bfloat16), or with `compute_type=`, the encoder computes in
that dtype: each attention and feed-forward block casts its input to it, and every dense layer
casts its float32 kernel and bias to the dtype of its input at use, so the backward pass of that
cast hands float32 gradients to the float32 variables. The residual stream (embeddings, the
inputs and outputs of the layer norms, hence every layer's output), the attention softmax and
dropout stay float32, as does the pooler: the model's outputs are float32, so heads, softmax
cross-entropy and losses built on them stay float32 without a change to their code.
"""

import collections
import contextlib
import copy
import functools
import json
import math
import re
import zlib

import six
import tensorflow.compat.v1 as tf

from core import json_files
from core.errors import InputError

LAYER_NORM_EPSILON = 1e-12

# The stack of compute dtypes set by compute_dtype_scope; BertModel uses the innermost.
_COMPUTE_DTYPES = [tf.float32]


@contextlib.contextmanager
def compute_dtype_scope(dtype):
  """Every BertModel built inside computes its encoder in `dtype` (variables stay float32).

  engine/training.py wraps each tower in it for --use_fp16 / --use_bf16, so run scripts and heads need
  no precision argument.

  Args:
    dtype: tf.float32, tf.float16 or tf.bfloat16 (or their names).
  """
  _COMPUTE_DTYPES.append(tf.as_dtype(dtype))
  try:
    yield
  finally:
    _COMPUTE_DTYPES.pop()


def get_compute_dtype():
  """The compute dtype of the innermost compute_dtype_scope (tf.float32 outside any)."""
  return _COMPUTE_DTYPES[-1]


# The stack of part placers set by part_placement_scope; BertModel uses the innermost.
_PART_PLACERS = [None]


@contextlib.contextmanager
def part_placement_scope(placer):
  """Every BertModel built inside asks `placer` where each of its parts goes.

  tower_utils sets it for pipeline stages, so the model never learns about devices: it only
  names its parts. `placer` has `begin(config)`, called once per model with its BertConfig
  (begin_model), and `device(part, index=None)` -> a device string or function for part
  "embeddings", ("layer", k) or "pooler".
  """
  _PART_PLACERS.append(placer)
  try:
    yield
  finally:
    _PART_PLACERS.pop()


# The stack of layer runners set by layer_runner_scope; transformer_model uses the innermost.
_LAYER_RUNNERS = [None]


@contextlib.contextmanager
def layer_runner_scope(runner):
  """Every encoder layer built inside is built by `runner(layer_fn, layer_input)`.

  tower_utils sets it for --recompute=layer (parallel/recompute.py), so the model never learns
  how its layers are differentiated. `layer_fn(layer_input)` builds one layer in the current
  variable scope and returns its output; it may be called again (a recomputation) and then
  builds the same math with the same dropout masks. None: layer_fn is called once, as is.
  """
  _LAYER_RUNNERS.append(runner)
  try:
    yield
  finally:
    _LAYER_RUNNERS.pop()


# The stack of choices set by fused_gelu_compile_scope; fused_gelu uses the innermost.
_COMPILE_FUSED_GELU = [True]


@contextlib.contextmanager
def fused_gelu_compile_scope(compile_gelu):
  """Whether fused_gelu, built inside, marks its two halves for XLA (jit_scope).

  tower_utils sets it: on CPUs yes (one fused loop instead of about ten float32 kernels, see
  fused_gelu); on GPUs only under --use_xla, since XLA compiles a kernel for each input shape
  and without --use_xla padded batches of a new length would compile again, per layer and
  tower, in the middle of training.
  """
  _COMPILE_FUSED_GELU.append(bool(compile_gelu))
  try:
    yield
  finally:
    _COMPILE_FUSED_GELU.pop()


# Per tower_copy_scope, the tower copies made so far: {table name: copy}.
_TOWER_COPIES = [None]
_DENSE_COPY_GRADIENT = "BertMgpuTowerCopy"


@contextlib.contextmanager
def tower_copy_scope():
  """Inside, a table that a model reads whole (see tower_copy) is read once, on the device of
  the first read: tower_utils opens one per tower, so the model never learns about towers."""
  _TOWER_COPIES.append({})
  try:
    yield
  finally:
    _TOWER_COPIES.pop()


@tf.RegisterGradient(_DENSE_COPY_GRADIENT)
def _tower_copy_gradient(op, grad):
  """A tower copy's gradient, summed where the copy is and sent to the table dense: the
  gathered rows and the tied output layer's dense part are one [vocab, width] tensor then,
  instead of both crossing to the table's device (vocab + gathered rows)."""
  if not isinstance(grad, tf.IndexedSlices):
    return grad
  rows = op.inputs[0].shape[0]
  rows = rows if rows is not None else tf.shape(op.inputs[0], out_type=grad.indices.dtype)[0]
  return tf.math.unsorted_segment_sum(grad.values, grad.indices, rows)


def tower_copy(table):
  """float Tensor [vocab, width]: `table` read whole on the current device, once per
  tower_copy_scope (`table` itself outside one).

  For a word-embedding table that an output layer multiplies by (a masked-LM head tied to
  it): the tower reads the whole table anyway, so the words are gathered from this copy, and
  the gradient of both uses is summed here and sent to the table's device once, dense.
  """
  copies = _TOWER_COPIES[-1]
  if copies is None:
    return table
  name = table.op.name
  if name not in copies:
    with tf.get_default_graph().gradient_override_map({"Identity": _DENSE_COPY_GRADIENT}):
      # The value, not a reference: an op reading a reference runs where the variable is.
      copies[name] = tf.identity(tf.convert_to_tensor(table),
                                 name=name.split("/")[-1] + "_tower_copy")
  return copies[name]


# The stack of dropout seeds of the encoder layer being built (see seeded_dropout_scope).
_DROPOUT_SEEDS = [None]


class _DropoutSeed(object):
  """A stateless seed [2] and a count of the dropouts drawn from it."""

  def __init__(self, seed):
    self.seed = seed
    self.count = 0

  def next(self):
    """The seed of the next dropout: this one's with its second half shifted by the count."""
    self.count += 1
    return self.seed + tf.constant([0, self.count], dtype=self.seed.dtype)


@contextlib.contextmanager
def seeded_dropout_scope(seed):
  """Every `dropout` inside draws its mask from `seed` (int32 Tensor [2]) statelessly.

  The k-th dropout of the scope uses seed + [0, k], so building the same code again in a new
  scope with the same seed draws the same masks (what a recomputed layer needs).
  """
  _DROPOUT_SEEDS.append(_DropoutSeed(seed))
  try:
    yield
  finally:
    _DROPOUT_SEEDS.pop()


def begin_model(config):
  """Tells the innermost placer that the parts of a model of `config` follow.

  BertModel calls it; so must code that builds an encoder from bert_embeddings and
  transformer_model itself (ELECTRA's generator), before naming its parts with part_scope.
  """
  if _PART_PLACERS[-1] is not None:
    _PART_PLACERS[-1].begin(config)


def part_scope(part, index=None):
  """tf.device scope of a model part under the innermost placer (no scope without one).

  part: "embeddings", "layer" (index: the encoder layer) or "pooler".
  """
  placer = _PART_PLACERS[-1]
  if placer is None:
    return contextlib.nullcontext()
  return tf.device(placer.device(part, index))

_REQUIRED_CONFIG_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                         "intermediate_size")
_INTEGER_KEYS = _REQUIRED_CONFIG_KEYS + ("max_position_embeddings", "type_vocab_size")
ACTIVATIONS = ("gelu", "relu", "tanh", "linear")


class BertConfig(object):
  """Hyper-parameters of a `BertModel`, read from and written to `bert_config.json`."""

  def __init__(self,
               vocab_size,
               hidden_size=768,
               num_hidden_layers=12,
               num_attention_heads=12,
               intermediate_size=3072,
               hidden_act="gelu",
               hidden_dropout_prob=0.1,
               attention_probs_dropout_prob=0.1,
               max_position_embeddings=512,
               type_vocab_size=16,
               initializer_range=0.02):
    """Constructs BertConfig.

    Args:
      vocab_size: Size of the WordPiece vocabulary (rows of `word_embeddings`).
      hidden_size: Width H of the encoder layers and the pooler.
      num_hidden_layers: Number of Transformer layers.
      num_attention_heads: Attention heads per layer; must divide hidden_size.
      intermediate_size: Width of the feed-forward layer inside each Transformer layer.
      hidden_act: Activation of the feed-forward layer ("gelu", "relu", "tanh", "linear").
      hidden_dropout_prob: Dropout rate on embeddings, layer outputs and the pooler input.
      attention_probs_dropout_prob: Dropout rate on attention probabilities.
      max_position_embeddings: Longest sequence the model can take (rows of
        `position_embeddings`), 512 for Google's models.
      type_vocab_size: Number of token types (segment ids).
      initializer_range: Stddev of the truncated normal initializer of all weights.
    """
    self.vocab_size = vocab_size
    self.hidden_size = hidden_size
    self.num_hidden_layers = num_hidden_layers
    self.num_attention_heads = num_attention_heads
    self.hidden_act = hidden_act
    self.intermediate_size = intermediate_size
    self.hidden_dropout_prob = hidden_dropout_prob
    self.attention_probs_dropout_prob = attention_probs_dropout_prob
    self.max_position_embeddings = max_position_embeddings
    self.type_vocab_size = type_vocab_size
    self.initializer_range = initializer_range

  @classmethod
  def from_dict(cls, json_object):
    """Constructs a `BertConfig` from a Python dict; raises InputError on missing keys."""
    if not isinstance(json_object, dict):
      raise InputError("expected a JSON object {\"vocab_size\": ..., ...}, got %s" %
                       type(json_object).__name__)
    missing = [k for k in _REQUIRED_CONFIG_KEYS if k not in json_object]
    if missing:
      raise InputError("BERT config is missing key(s) %s; expected at least %s" %
                       (", ".join(missing), ", ".join(_REQUIRED_CONFIG_KEYS)))
    config = BertConfig(vocab_size=None)
    for (key, value) in six.iteritems(json_object):
      config.__dict__[key] = value
    config.validate()
    return config

  def validate(self):
    """Raises InputError naming the first key whose value has the wrong type or range."""
    for key in _INTEGER_KEYS:
      value = getattr(self, key)
      if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError("\"%s\": %s: expected an integer >= 1" % (key, json.dumps(value)))
    for key in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
      value = getattr(self, key)
      if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise InputError("\"%s\": %s: expected a number in [0, 1)" % (key, json.dumps(value)))
    value = self.initializer_range
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
      raise InputError("\"initializer_range\": %s: expected a number > 0" % json.dumps(value))
    if not (isinstance(self.hidden_act, six.string_types) and
            self.hidden_act.lower() in ACTIVATIONS):
      raise InputError("\"hidden_act\": %s: expected one of %s" %
                       (json.dumps(self.hidden_act), ", ".join(ACTIVATIONS)))
    if self.hidden_size % self.num_attention_heads:
      raise InputError("hidden_size=%d is not a multiple of num_attention_heads=%d (each head "
                       "gets hidden_size / num_attention_heads dimensions)" %
                       (self.hidden_size, self.num_attention_heads))

  @classmethod
  def from_json_file(cls, json_file):
    """Constructs a `BertConfig` from a json file; errors name the file."""
    data = json_files.read_object(json_file, name="bert_config_file %s" % json_file)
    try:
      return cls.from_dict(data)
    except InputError as e:
      raise InputError("bert_config_file %s: %s" % (json_file, e))

  def to_dict(self):
    """Serializes this instance to a Python dictionary."""
    return copy.deepcopy(self.__dict__)

  def to_json_string(self):
    """Serializes this instance to a JSON string."""
    return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"


class BertModel(object):
  """BERT: embeddings, a stack of Transformer encoder layers and a pooler.

  Example usage (as in google-research/bert):

  ```python
  input_ids = tf.constant([[31, 51, 99], [15, 5, 0]])
  input_mask = tf.constant([[1, 1, 1], [1, 1, 0]])
  token_type_ids = tf.constant([[0, 0, 1], [0, 2, 0]])
  config = modeling.BertConfig(vocab_size=32000, hidden_size=512,
    num_hidden_layers=8, num_attention_heads=6, intermediate_size=1024)
  model = modeling.BertModel(config=config, is_training=True,
    input_ids=input_ids, input_mask=input_mask, token_type_ids=token_type_ids)
  pooled_output = model.get_pooled_output()
  ```
  """

  def __init__(self,
               config,
               is_training,
               input_ids,
               input_mask=None,
               token_type_ids=None,
               use_one_hot_embeddings=False,
               scope=None,
               attention_mask=None,
               compute_type=None,
               tied_output=False):
    """Constructor for BertModel.

    Args:
      config: `BertConfig` instance.
      is_training: bool. True applies dropout; False turns it off.
      input_ids: int32 Tensor of shape [batch_size, seq_length].
      input_mask: (optional) int32 Tensor of shape [batch_size, seq_length], 1 on real tokens.
      token_type_ids: (optional) int32 Tensor of shape [batch_size, seq_length].
      use_one_hot_embeddings: (optional) bool. Look up word embeddings with a one-hot matmul
        (faster on TPUs) instead of a gather.
      scope: (optional) variable scope. Defaults to "bert".
      attention_mask: (optional) float/int Tensor of shape [batch_size, seq_length, seq_length],
        1 where position `from` may attend to position `to`. Overrides the mask built from
        `input_mask`; the rewrite (seq2seq) model passes its UniLM mask here.
      compute_type: (optional) dtype of the encoder's math (tf.float16 or tf.bfloat16 for mixed
        precision). Defaults to get_compute_dtype(). Variables and outputs stay float32.
      tied_output: (optional) bool. The caller multiplies by the whole word-embedding table (a
        masked-LM head tied to it): the words are then gathered from the tower's copy of the
        table (tower_copy), which get_embedding_table returns.

    Raises:
      InputError: the sequence is longer than config.max_position_embeddings, or the hidden
        size is not a multiple of the number of heads.
    """
    config = copy.deepcopy(config)
    if not is_training:
      config.hidden_dropout_prob = 0.0
      config.attention_probs_dropout_prob = 0.0

    input_shape = get_shape_list(input_ids, expected_rank=2)
    batch_size = input_shape[0]
    seq_length = input_shape[1]
    check_config_for_sequence(config, seq_length)
    compute_type = tf.as_dtype(compute_type or get_compute_dtype())

    if input_mask is None:
      input_mask = tf.ones(shape=[batch_size, seq_length], dtype=tf.int32)
    if token_type_ids is None:
      token_type_ids = tf.zeros(shape=[batch_size, seq_length], dtype=tf.int32)

    begin_model(config)
    # An explicit name (stock uses default_name="bert") so that building the model again under
    # reuse finds bert/... instead of creating a uniquified bert_1/... copy.
    with tf.variable_scope(scope or "bert"):
      with tf.variable_scope("embeddings"), part_scope("embeddings"):
        (self.embedding_output, self.embedding_table) = bert_embeddings(
            config, input_ids, token_type_ids, use_one_hot_embeddings, tied_output)

      with tf.variable_scope("encoder"):
        if attention_mask is None:
          with part_scope("embeddings"):
            attention_mask = create_attention_mask_from_input_mask(input_ids, input_mask)
        # float32 residual stream; attention and feed-forward blocks compute in compute_type.
        self.all_encoder_layers = transformer_model(
            input_tensor=self.embedding_output,
            attention_mask=attention_mask,
            hidden_size=config.hidden_size,
            num_hidden_layers=config.num_hidden_layers,
            num_attention_heads=config.num_attention_heads,
            intermediate_size=config.intermediate_size,
            intermediate_act_fn=training_activation(get_activation(config.hidden_act),
                                                    compute_type, is_training),
            hidden_dropout_prob=config.hidden_dropout_prob,
            attention_probs_dropout_prob=config.attention_probs_dropout_prob,
            initializer_range=config.initializer_range,
            do_return_all_layers=True,
            compute_type=compute_type)

      self.sequence_output = self.all_encoder_layers[-1]
      # The pooler takes the hidden state of the first token ([CLS]) through a tanh dense layer,
      # pre-trained on next-sentence prediction.
      with tf.variable_scope("pooler"), part_scope("pooler"):
        first_token_tensor = tf.squeeze(self.sequence_output[:, 0:1, :], axis=1)
        self.pooled_output = dense_layer(
            first_token_tensor, config.hidden_size, name="dense", activation=tf.tanh,
            initializer=create_initializer(config.initializer_range))

  def get_pooled_output(self):
    """float Tensor [batch_size, hidden_size]: the pooled [CLS] representation."""
    return self.pooled_output

  def get_sequence_output(self):
    """float Tensor [batch_size, seq_length, hidden_size]: the final encoder layer."""
    return self.sequence_output

  def get_all_encoder_layers(self):
    """List of num_hidden_layers float Tensors [batch_size, seq_length, hidden_size]."""
    return self.all_encoder_layers

  def get_embedding_output(self):
    """float Tensor [batch_size, seq_length, hidden_size]: word + position + type embeddings,
    after layer norm and dropout; the input of the first Transformer layer."""
    return self.embedding_output

  def get_embedding_table(self):
    """float [vocab_size, hidden_size]: the word embedding table (a Variable; with
    tied_output, the tower's copy of it)."""
    return self.embedding_table


def bert_embeddings(config, input_ids, token_type_ids, use_one_hot_embeddings=False,
                    tied_output=False):
  """BERT's input embeddings in the current variable scope (stock: "bert/embeddings").

  Word, position and token-type tables of width config.hidden_size, then layer norm and dropout
  (config.hidden_dropout_prob). ELECTRA's generator calls this under the discriminator's scope to
  share the same tables.

  Args:
    config: `BertConfig`.
    input_ids: int32 Tensor [batch_size, seq_length].
    token_type_ids: int32 Tensor [batch_size, seq_length].
    use_one_hot_embeddings: look words up with a one-hot matmul instead of a gather.
    tied_output: the caller multiplies by the whole table (see embedding_lookup).

  Returns:
    (output float Tensor [batch_size, seq_length, hidden_size],
     word embedding table float [vocab_size, hidden_size]: the Variable, or its tower copy
     with tied_output).
  """
  output, table = embedding_lookup(
      input_ids=input_ids,
      vocab_size=config.vocab_size,
      embedding_size=config.hidden_size,
      initializer_range=config.initializer_range,
      word_embedding_name="word_embeddings",
      use_one_hot_embeddings=use_one_hot_embeddings,
      tied_output=tied_output)
  output = embedding_postprocessor(
      input_tensor=output,
      use_token_type=True,
      token_type_ids=token_type_ids,
      token_type_vocab_size=config.type_vocab_size,
      token_type_embedding_name="token_type_embeddings",
      use_position_embeddings=True,
      position_embedding_name="position_embeddings",
      initializer_range=config.initializer_range,
      max_position_embeddings=config.max_position_embeddings,
      dropout_prob=config.hidden_dropout_prob)
  return output, table


def check_config_for_sequence(config, seq_length):
  """Raises InputError when `config` cannot encode sequences of `seq_length` tokens."""
  if config.hidden_size % config.num_attention_heads != 0:
    raise InputError(
        "BERT config: hidden_size=%d is not a multiple of num_attention_heads=%d" %
        (config.hidden_size, config.num_attention_heads))
  if isinstance(seq_length, int) and seq_length > config.max_position_embeddings:
    raise InputError(
        "max_seq_length=%d exceeds max_position_embeddings=%d of the BERT config: the model has "
        "no position embedding beyond that; use --max_seq_length<=%d" %
        (seq_length, config.max_position_embeddings, config.max_position_embeddings))


def gelu(x):
  """Gaussian Error Linear Unit, tanh approximation (as in the released BERT models).

  0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), built by TensorFlow's own tf.nn.gelu
  (approximate=True): the same values as stock BERT's `x * cdf` (the factor 0.5 is exact), and
  the subgraph that grappler's remapper recognizes, so without a gradient (serving, eval,
  predict) a dense layer's MatMul, BiasAdd and GELU run as one oneDNN kernel on CPUs
  (_MklNativeFusedMatMul with fused_ops [BiasAdd, GeluApproximate]) instead of a matmul and
  eight element-wise kernels (measured: docs/results/serving.md, "Serving against ONNX Runtime").

  Args:
    x: float Tensor of any shape.

  Returns:
    `x` with GELU applied elementwise.
  """
  return tf.compat.v2.nn.gelu(x, approximate=True)


def fused_gelu(x):
  """`gelu` of a 16-bit `x` for training: float32 math, forward and gradient each one XLA kernel.

  The same function as `gelu` (computed in float32 and rounded once to x's dtype), with its
  gradient written out (d/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2),
  t the tanh) and recomputed from x, so the forward pass keeps nothing but x. On CPUs the
  differentiated `gelu` is about 40 bfloat16 element-wise kernels per layer over
  [batch*seq, intermediate] values, each converting to float32 and back element by element:
  measured on an AMX Xeon, BERT-base seq 128 batch 8 --use_bf16, those took as long as all the
  matmuls of the step. On that 2-core Sapphire Rapids-class Xeon, quiet, the step trains 6.3-6.6
  examples/sec with this GELU, 6.0 with the same float32 math unfused, and 5.3-5.4 with the
  differentiated `gelu` (docs/results/speed.md, "bf16 on AMX"). Each half is marked for XLA with
  jit_scope, which fuses it into one loop whatever --use_xla says (on CPUs; on GPUs only with
  --use_xla: fused_gelu_compile_scope); the matmuls around it stay oneDNN's.

  Args:
    x: bfloat16 or float16 Tensor of any shape.

  Returns:
    Tensor of x's shape and dtype.
  """

  def tanh_term(x32):
    return tf.tanh(math.sqrt(2.0 / math.pi) * (x32 + 0.044715 * x32 * x32 * x32))

  def compiled():
    if _COMPILE_FUSED_GELU[-1]:
      return tf.xla.experimental.jit_scope(separate_compiled_gradients=False)
    return contextlib.nullcontext()

  @tf.custom_gradient
  def fused(x):
    with compiled():
      x32 = tf.cast(x, tf.float32)
      y = tf.cast(0.5 * x32 * (1.0 + tanh_term(x32)), x.dtype)

    def grad(dy):
      with compiled():
        x32 = tf.cast(x, tf.float32)
        t = tanh_term(x32)
        slope = 0.5 * (1.0 + t) + 0.5 * x32 * (1.0 - t * t) * (
            math.sqrt(2.0 / math.pi) * (1.0 + 3.0 * 0.044715 * x32 * x32))
        return tf.cast(tf.cast(dy, tf.float32) * slope, x.dtype)

    return y, grad

  return fused(x)


def training_activation(activation, compute_type, is_training):
  """`activation`, or fused_gelu in its place when training `gelu` in a 16-bit compute_type."""
  if is_training and activation is gelu and compute_type in (tf.float16, tf.bfloat16):
    return fused_gelu
  return activation


def get_activation(activation_string):
  """Maps "gelu"/"relu"/"tanh"/"linear" (or a callable, or None/"") to an activation function."""
  if not isinstance(activation_string, six.string_types):
    return activation_string
  if not activation_string:
    return None
  act = activation_string.lower()
  if act == "linear":
    return None
  if act == "relu":
    return tf.nn.relu
  if act == "gelu":
    return gelu
  if act == "tanh":
    return tf.tanh
  raise InputError("Unsupported activation in BERT config: %s" % act)


def get_assignment_map_from_checkpoint(tvars, init_checkpoint):
  """Maps checkpoint variables to the graph's variables of the same name.

  Args:
    tvars: list of graph Variables.
    init_checkpoint: checkpoint path prefix.

  Returns:
    (assignment_map, initialized_variable_names): an OrderedDict from checkpoint name to graph
    name for every checkpoint variable present in the graph, and a dict whose keys are those
    names (plus "name:0") for logging which variables were initialised.
  """
  initialized_variable_names = {}
  name_to_variable = collections.OrderedDict()
  for var in tvars:
    name = var.name
    m = re.match("^(.*):\\d+$", name)
    if m is not None:
      name = m.group(1)
    name_to_variable[name] = var

  assignment_map = collections.OrderedDict()
  for (name, _) in tf.train.list_variables(init_checkpoint):
    if name not in name_to_variable:
      continue
    assignment_map[name] = name
    initialized_variable_names[name] = 1
    initialized_variable_names[name + ":0"] = 1
  return (assignment_map, initialized_variable_names)


def dropout(input_tensor, dropout_prob):
  """Drops each element with probability `dropout_prob` (a rate, as tf.nn.dropout in TF 2).

  The kept values are scaled by 1 / (1 - dropout_prob), as tf.nn.dropout does. Inside a
  seeded_dropout_scope the mask is drawn from the scope's seed (the same mask when the layer is
  built again); elsewhere from a seed drawn by one stateful op seeded by its name (_name_seed).

  Args:
    input_tensor: float Tensor of any shape.
    dropout_prob: Python float in [0, 1), the probability of dropping (NOT of keeping) a value.

  Returns:
    A Tensor of the same shape and dtype, or `input_tensor` itself when dropout_prob is None
    or 0.
  """
  if dropout_prob is None or dropout_prob == 0.0:
    return input_tensor
  if _DROPOUT_SEEDS[-1] is not None:
    seed = _DROPOUT_SEEDS[-1].next()
  else:
    seed = tf.random.uniform([2], maxval=2**31 - 1, dtype=tf.int32, seed=_name_seed("dropout"))
  with tf.name_scope("dropout"):
    keep = _keep_mask(tf.shape(input_tensor), dropout_prob, seed)
    scale = tf.constant(1.0 / (1.0 - dropout_prob), dtype=input_tensor.dtype)
    output = tf.where_v2(keep, input_tensor * scale, tf.zeros([], dtype=input_tensor.dtype))
  output.set_shape(input_tensor.shape)
  return output


def _keep_mask(shape, dropout_prob, seed):
  """bool Tensor of `shape`: True with probability 1 - dropout_prob, from a stateless seed.

  Each element is decided by 16 random bits (two per 32-bit Philox word, compared with
  round(dropout_prob * 2^16)), where tf.nn.dropout spends a word and a float conversion per
  element: generating the random numbers was the largest part of dropout's cost (a BERT-base
  step's 36 dropouts at batch 8: 107 ms against 47 in bf16 on the development machine).
  The keep probability is exact to 2^-17.

  Args:
    shape: int32 Tensor [rank], the mask's shape.
    dropout_prob: Python float in (0, 1).
    seed: int32 Tensor [2], a stateless seed.
  """
  size = tf.reduce_prod(shape)
  words = tf.random.stateless_uniform([(size + 1) // 2], seed, minval=None, maxval=None,
                                      dtype=tf.uint32)
  halves = tf.reshape(tf.bitcast(words, tf.uint16), [-1])[:size]
  threshold = min(int(round(dropout_prob * 65536)), 65535)
  return tf.reshape(halves, shape) >= tf.constant(threshold, dtype=tf.uint16)


def layer_norm(input_tensor, name=None):
  """Layer normalization over the last axis, variables `<name or LayerNorm>/{beta,gamma}`.

  Args:
    input_tensor: float Tensor [..., hidden_size].
    name: scope name, default "LayerNorm" (the name in Google's checkpoints).

  Returns:
    Normalized Tensor of the same shape, computed in float32 with epsilon 1e-12.
  """
  with tf.variable_scope(name, default_name="LayerNorm"):
    params_shape = [get_shape_list(input_tensor)[-1]]
    beta = tf.get_variable("beta", shape=params_shape, dtype=tf.float32,
                           initializer=tf.zeros_initializer())
    gamma = tf.get_variable("gamma", shape=params_shape, dtype=tf.float32,
                            initializer=tf.ones_initializer())
    x = tf.cast(input_tensor, tf.float32)
    mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
    normed = (x - mean) * tf.math.rsqrt(variance + LAYER_NORM_EPSILON) * gamma + beta
    return tf.cast(normed, input_tensor.dtype)


def layer_norm_and_dropout(input_tensor, dropout_prob, name=None):
  """Layer norm followed by dropout."""
  output_tensor = layer_norm(input_tensor, name)
  return dropout(output_tensor, dropout_prob)


def create_initializer(initializer_range=0.02):
  """A truncated normal initializer with the given stddev."""
  return tf.truncated_normal_initializer(stddev=initializer_range)


def as_dtype(variable, dtype):
  """`variable`'s value as `dtype`, cast where the variable lives.

  Under mixed precision a tower on another device than the variable (one copy spread over the
  devices, --reduction=shared) then receives 16-bit values, and the gradient of the cast comes
  back as 16-bit too: half the bytes each way. The same values as a cast in the tower.

  Args:
    variable: float32 Variable.
    dtype: the compute dtype.

  Returns:
    Tensor of variable's shape in `dtype`.
  """
  if variable.dtype.base_dtype == tf.as_dtype(dtype):
    return tf.convert_to_tensor(variable)
  with tf.colocate_with(variable):
    return tf.cast(variable, dtype)


def dense_layer(input_tensor, units, name="dense", activation=None, initializer=None):
  """A fully connected layer with variables `<name>/kernel` [in, units] and `<name>/bias` [units].

  Written with get_variable (tf.layers.dense is gone with Keras 3) so the names match Google's
  checkpoints exactly.

  Args:
    input_tensor: float Tensor [..., in_width].
    units: output width.
    name: variable scope of the layer.
    activation: optional elementwise function applied to the output.
    initializer: kernel initializer; bias starts at zero.

  Returns:
    float Tensor [..., units].
  """
  in_width = get_shape_list(input_tensor)[-1]
  with tf.variable_scope(name):
    kernel = tf.get_variable("kernel", shape=[in_width, units],
                             initializer=initializer or create_initializer())
    bias = tf.get_variable("bias", shape=[units], initializer=tf.zeros_initializer())
    kernel, bias = as_dtype(kernel, input_tensor.dtype), as_dtype(bias, input_tensor.dtype)
    if input_tensor.shape.ndims == 2:
      output = tf.matmul(input_tensor, kernel)
    else:
      output = tf.tensordot(input_tensor, kernel, axes=1)
    output = tf.nn.bias_add(output, bias)
    if activation is not None:
      output = activation(output)
    return output


def embedding_lookup(input_ids,
                     vocab_size,
                     embedding_size=128,
                     initializer_range=0.02,
                     word_embedding_name="word_embeddings",
                     use_one_hot_embeddings=False,
                     tied_output=False):
  """Looks up word embeddings for id tensor.

  Args:
    input_ids: int32 Tensor [batch_size, seq_length] of word ids.
    vocab_size: rows of the embedding table.
    embedding_size: width of the embeddings.
    initializer_range: stddev of the table's initializer.
    word_embedding_name: name of the table variable.
    use_one_hot_embeddings: one-hot matmul instead of gather (dense instead of sparse gradient).
    tied_output: the caller multiplies by the whole table (a tied output layer), so the tower
      reads all of it anyway: gather from its copy (tower_copy), and return that copy.

  Returns:
    (output [batch_size, seq_length, embedding_size], embedding_table [vocab_size, embedding_size]:
     the Variable, or its tower copy with tied_output).
  """
  if input_ids.shape.ndims == 2:
    input_ids = tf.expand_dims(input_ids, axis=[-1])

  embedding_table = tf.get_variable(
      name=word_embedding_name,
      shape=[vocab_size, embedding_size],
      initializer=create_initializer(initializer_range))

  flat_input_ids = tf.reshape(input_ids, [-1])
  if use_one_hot_embeddings:
    one_hot_input_ids = tf.one_hot(flat_input_ids, depth=vocab_size)
    output = tf.matmul(one_hot_input_ids, embedding_table)
  elif tied_output:
    embedding_table = tower_copy(embedding_table)
    output = tf.gather(embedding_table, flat_input_ids)
  else:
    # A gather gives an IndexedSlices gradient: only the rows used are sent between devices.
    # It runs where the table is (so does its gradient), so a tower on another device
    # receives its rows, not the whole table.
    with tf.colocate_with(embedding_table):
      output = tf.gather(embedding_table, flat_input_ids)

  input_shape = get_shape_list(input_ids)
  output = tf.reshape(output, input_shape[0:-1] + [input_shape[-1] * embedding_size])
  return (output, embedding_table)


def embedding_postprocessor(input_tensor,
                            use_token_type=False,
                            token_type_ids=None,
                            token_type_vocab_size=16,
                            token_type_embedding_name="token_type_embeddings",
                            use_position_embeddings=True,
                            position_embedding_name="position_embeddings",
                            initializer_range=0.02,
                            max_position_embeddings=512,
                            dropout_prob=0.1):
  """Adds token-type and position embeddings, then layer norm and dropout.

  Args:
    input_tensor: float Tensor [batch_size, seq_length, embedding_size].
    use_token_type: add `token_type_ids` embeddings.
    token_type_ids: (optional) int32 Tensor [batch_size, seq_length].
    token_type_vocab_size: rows of the token type table.
    token_type_embedding_name: name of that table.
    use_position_embeddings: add learned absolute position embeddings.
    position_embedding_name: name of that table.
    initializer_range: stddev of the initializers.
    max_position_embeddings: rows of the position table; seq_length may not exceed it.
    dropout_prob: dropout rate applied to the output.

  Returns:
    float Tensor of the shape of `input_tensor`.
  """
  input_shape = get_shape_list(input_tensor, expected_rank=3)
  batch_size = input_shape[0]
  seq_length = input_shape[1]
  width = input_shape[2]

  output = input_tensor

  if use_token_type:
    if token_type_ids is None:
      raise ValueError("`token_type_ids` must be specified if `use_token_type` is True.")
    token_type_table = tf.get_variable(
        name=token_type_embedding_name,
        shape=[token_type_vocab_size, width],
        initializer=create_initializer(initializer_range))
    # The type vocabulary is tiny, so a one-hot matmul is faster than a gather.
    flat_token_type_ids = tf.reshape(token_type_ids, [-1])
    one_hot_ids = tf.one_hot(flat_token_type_ids, depth=token_type_vocab_size)
    token_type_embeddings = tf.matmul(one_hot_ids, token_type_table)
    token_type_embeddings = tf.reshape(token_type_embeddings, [batch_size, seq_length, width])
    output += token_type_embeddings

  if use_position_embeddings:
    if isinstance(seq_length, int) and seq_length > max_position_embeddings:
      raise InputError(
          "sequence length %d exceeds max_position_embeddings=%d" %
          (seq_length, max_position_embeddings))
    full_position_embeddings = tf.get_variable(
        name=position_embedding_name,
        shape=[max_position_embeddings, width],
        initializer=create_initializer(initializer_range))
    position_embeddings = tf.slice(full_position_embeddings, [0, 0], [seq_length, -1])
    output += tf.expand_dims(position_embeddings, 0)

  output = layer_norm_and_dropout(output, dropout_prob)
  return output


def create_attention_mask_from_input_mask(from_tensor, to_mask):
  """Creates a 3D attention mask from a 2D padding mask.

  Args:
    from_tensor: Tensor [batch_size, from_seq_length, ...].
    to_mask: int32 Tensor [batch_size, to_seq_length], 1 on real tokens.

  Returns:
    float Tensor [batch_size, from_seq_length, to_seq_length].
  """
  from_shape = get_shape_list(from_tensor, expected_rank=[2, 3])
  batch_size = from_shape[0]
  from_seq_length = from_shape[1]

  to_shape = get_shape_list(to_mask, expected_rank=2)
  to_seq_length = to_shape[1]

  to_mask = tf.cast(tf.reshape(to_mask, [batch_size, 1, to_seq_length]), tf.float32)
  # Every `from` position gets the same row: padding is hidden from all of them. Padding rows
  # themselves attend normally; their outputs are never used.
  broadcast_ones = tf.ones(shape=[batch_size, from_seq_length, 1], dtype=tf.float32)
  return broadcast_ones * to_mask


def attention_layer(from_tensor,
                    to_tensor,
                    attention_mask=None,
                    num_attention_heads=1,
                    size_per_head=512,
                    query_act=None,
                    key_act=None,
                    value_act=None,
                    attention_probs_dropout_prob=0.0,
                    initializer_range=0.02,
                    do_return_2d_tensor=False,
                    batch_size=None,
                    from_seq_length=None,
                    to_seq_length=None):
  """Multi-headed scaled dot-product attention from `from_tensor` to `to_tensor`.

  Variables: `query`, `key`, `value` dense layers, each [width, N*H].

  Args:
    from_tensor: float Tensor [batch_size, from_seq_length, from_width] (or 2D
      [batch_size*from_seq_length, from_width] with the sizes given).
    to_tensor: float Tensor [batch_size, to_seq_length, to_width] (or 2D likewise).
    attention_mask: (optional) Tensor [batch_size, from_seq_length, to_seq_length], 1 = may attend.
    num_attention_heads: N.
    size_per_head: H.
    query_act, key_act, value_act: optional activations of the projections.
    attention_probs_dropout_prob: dropout rate on the attention probabilities.
    initializer_range: stddev of the initializers.
    do_return_2d_tensor: return [batch_size*from_seq_length, N*H] instead of 3D.
    batch_size, from_seq_length, to_seq_length: needed when the inputs are 2D.

  Returns:
    float Tensor [batch_size, from_seq_length, N*H] (or 2D, see above).
  """

  def transpose_for_scores(input_tensor, batch_size, num_attention_heads, seq_length, width):
    output_tensor = tf.reshape(input_tensor, [batch_size, seq_length, num_attention_heads, width])
    return tf.transpose(output_tensor, [0, 2, 1, 3])

  from_shape = get_shape_list(from_tensor, expected_rank=[2, 3])
  to_shape = get_shape_list(to_tensor, expected_rank=[2, 3])
  if len(from_shape) != len(to_shape):
    raise ValueError("The rank of `from_tensor` must match the rank of `to_tensor`.")

  if len(from_shape) == 3:
    batch_size = from_shape[0]
    from_seq_length = from_shape[1]
    to_seq_length = to_shape[1]
  elif batch_size is None or from_seq_length is None or to_seq_length is None:
    raise ValueError("When passing in rank 2 tensors to attention_layer, the values for "
                     "`batch_size`, `from_seq_length`, and `to_seq_length` must all be specified.")

  from_tensor_2d = reshape_to_matrix(from_tensor)
  to_tensor_2d = reshape_to_matrix(to_tensor)
  initializer = create_initializer(initializer_range)
  width = num_attention_heads * size_per_head

  query_layer = dense_layer(from_tensor_2d, width, name="query", activation=query_act,
                            initializer=initializer)
  key_layer = dense_layer(to_tensor_2d, width, name="key", activation=key_act,
                          initializer=initializer)
  value_layer = dense_layer(to_tensor_2d, width, name="value", activation=value_act,
                            initializer=initializer)

  query_layer = transpose_for_scores(query_layer, batch_size, num_attention_heads,
                                     from_seq_length, size_per_head)
  key_layer = transpose_for_scores(key_layer, batch_size, num_attention_heads, to_seq_length,
                                   size_per_head)
  value_layer = tf.reshape(value_layer, [batch_size, to_seq_length, num_attention_heads,
                                         size_per_head])
  value_layer = tf.transpose(value_layer, [0, 2, 1, 3])

  context_layer = scaled_dot_product_attention(
      query_layer, key_layer, value_layer, attention_mask, attention_probs_dropout_prob)

  context_layer = tf.transpose(context_layer, [0, 2, 1, 3])
  if do_return_2d_tensor:
    return tf.reshape(context_layer, [batch_size * from_seq_length, width])
  return tf.reshape(context_layer, [batch_size, from_seq_length, width])


def scaled_dot_product_attention(query, key, value, attention_mask=None, dropout_prob=0.0):
  """softmax(Q K^T / sqrt(H) - 10000 * (1 - mask)) V, per head.

  Args:
    query: float Tensor [batch_size, N, from_seq_length, H].
    key: float Tensor [batch_size, N, to_seq_length, H].
    value: float Tensor [batch_size, N, to_seq_length, H].
    attention_mask: (optional) Tensor [batch_size, from_seq_length, to_seq_length], 1 = may attend.
    dropout_prob: dropout rate on the attention probabilities.

  Returns:
    float Tensor [batch_size, N, from_seq_length, H].
  """
  size_per_head = get_shape_list(query)[-1]
  scores = tf.matmul(query, key, transpose_b=True)
  # Mixed precision: masking, softmax and its dropout run in float32 (a 16-bit sum of
  # to_seq_length exponentials loses the small probabilities); only the matmuls are 16-bit.
  scores = tf.cast(scores, tf.float32) * (1.0 / math.sqrt(float(size_per_head)))
  if attention_mask is not None:
    mask = tf.cast(tf.expand_dims(attention_mask, axis=[1]), tf.float32)
    # A large negative bias before the softmax is the same as removing masked positions.
    scores += (1.0 - mask) * -10000.0
  probs = tf.nn.softmax(scores)
  probs = dropout(probs, dropout_prob)
  return tf.matmul(tf.cast(probs, value.dtype), value)


def transformer_model(input_tensor,
                      attention_mask=None,
                      hidden_size=768,
                      num_hidden_layers=12,
                      num_attention_heads=12,
                      intermediate_size=3072,
                      intermediate_act_fn=gelu,
                      hidden_dropout_prob=0.1,
                      attention_probs_dropout_prob=0.1,
                      initializer_range=0.02,
                      do_return_all_layers=False,
                      compute_type=None):
  """The Transformer encoder of "Attention is All You Need", post-layer-norm as in BERT.

  Mixed precision: the residual stream (each layer norm's input and output) keeps the dtype of
  `input_tensor` (float32 from BertModel); attention and feed-forward blocks compute in
  `compute_type` (their input is cast), and their outputs are cast back before dropout, the
  residual sum and the layer norm. A 16-bit residual stream would round away the small updates
  each layer adds to it (bfloat16 keeps 8 significant bits).

  Variables per layer, under `layer_<i>/`: `attention/self/{query,key,value}`,
  `attention/output/dense`, `attention/output/LayerNorm`, `intermediate/dense`, `output/dense`,
  `output/LayerNorm`.

  Args:
    input_tensor: float Tensor [batch_size, seq_length, hidden_size].
    attention_mask: (optional) Tensor [batch_size, seq_length, seq_length], 1 = may attend.
    hidden_size, num_hidden_layers, num_attention_heads, intermediate_size: the shape of the stack.
    intermediate_act_fn: activation of the feed-forward layer.
    hidden_dropout_prob: dropout rate on each sub-layer output.
    attention_probs_dropout_prob: dropout rate on the attention probabilities.
    initializer_range: stddev of the initializers.
    do_return_all_layers: return every layer's output instead of the last only.
    compute_type: (optional) dtype of the attention and feed-forward math; defaults to
      get_compute_dtype().

  Returns:
    Tensor [batch_size, seq_length, hidden_size] of input_tensor's dtype, or a list of
    num_hidden_layers of them.
  """
  if hidden_size % num_attention_heads != 0:
    raise InputError("hidden_size=%d is not a multiple of num_attention_heads=%d" %
                     (hidden_size, num_attention_heads))

  attention_head_size = int(hidden_size / num_attention_heads)
  input_shape = get_shape_list(input_tensor, expected_rank=3)
  batch_size = input_shape[0]
  seq_length = input_shape[1]
  input_width = input_shape[2]

  if input_width != hidden_size:
    raise ValueError("The width of the input tensor (%d) != hidden size (%d)" %
                     (input_width, hidden_size))

  compute_type = tf.as_dtype(compute_type or get_compute_dtype())
  residual_type = input_tensor.dtype
  # Layers work on 2D [batch*seq, width] tensors: the reshapes are free and matmuls are faster.
  with part_scope("layer", 0):
    prev_output = reshape_to_matrix(input_tensor)
  initializer = create_initializer(initializer_range)

  layer_seeds = None
  if hidden_dropout_prob or attention_probs_dropout_prob:
    with part_scope("layer", 0):
      layer_seeds = _layer_dropout_seeds(num_hidden_layers)

  def one_layer(layer_input, seed):
    """Layer `layer_input` [batch*seq, hidden] -> its output, in the current variable scope."""
    with seeded_dropout_scope(seed) if seed is not None else contextlib.nullcontext():
      block_input = tf.cast(layer_input, compute_type)

      with tf.variable_scope("attention"):
        with tf.variable_scope("self"):
          attention_output = attention_layer(
              from_tensor=block_input,
              to_tensor=block_input,
              attention_mask=attention_mask,
              num_attention_heads=num_attention_heads,
              size_per_head=attention_head_size,
              attention_probs_dropout_prob=attention_probs_dropout_prob,
              initializer_range=initializer_range,
              do_return_2d_tensor=True,
              batch_size=batch_size,
              from_seq_length=seq_length,
              to_seq_length=seq_length)

        with tf.variable_scope("output"):
          attention_output = dense_layer(attention_output, hidden_size, name="dense",
                                         initializer=initializer)
          attention_output = dropout(tf.cast(attention_output, residual_type),
                                     hidden_dropout_prob)
          attention_output = layer_norm(attention_output + layer_input)

      with tf.variable_scope("intermediate"):
        intermediate_output = dense_layer(tf.cast(attention_output, compute_type),
                                          intermediate_size, name="dense",
                                          activation=intermediate_act_fn,
                                          initializer=initializer)

      with tf.variable_scope("output"):
        layer_output = dense_layer(intermediate_output, hidden_size, name="dense",
                                   initializer=initializer)
        layer_output = dropout(tf.cast(layer_output, residual_type), hidden_dropout_prob)
        return layer_norm(layer_output + attention_output)

  runner = _LAYER_RUNNERS[-1]
  all_layer_outputs = []
  for layer_idx in range(num_hidden_layers):
    with tf.variable_scope("layer_%d" % layer_idx), part_scope("layer", layer_idx):
      seed = None if layer_seeds is None else layer_seeds[layer_idx]
      layer_fn = functools.partial(one_layer, seed=seed)
      prev_output = runner(layer_fn, prev_output) if runner else layer_fn(prev_output)
      all_layer_outputs.append(prev_output)

  if do_return_all_layers:
    return [reshape_from_matrix(layer_output, input_shape) for layer_output in all_layer_outputs]
  return reshape_from_matrix(prev_output, input_shape)


def _layer_dropout_seeds(num_layers):
  """int32 Tensor [num_layers, 2]: each encoder layer's dropout seed for this step.

  Drawn by one stateful op seeded by its name (see _name_seed): each tower and micro-batch
  draws its own seeds, and a recomputing graph the same as the plain one.
  """
  return tf.random.uniform([num_layers, 2], maxval=2**31 - 1, dtype=tf.int32,
                           seed=_name_seed("dropout_seeds"), name="dropout_seeds")


def _name_seed(name):
  """The op seed of a random op about to be named `name` in the current name scope.

  Derived from the op's full name rather than from the number of ops built before it (what
  TensorFlow does without an op seed), so that a graph with extra ops (recomputation, pipeline
  schedules) draws the same random numbers under the same tf.set_random_seed.
  """
  full_name = tf.get_default_graph().unique_name(name, mark_as_used=False)
  return zlib.crc32(full_name.encode("utf-8")) % (2**31 - 1)


def get_shape_list(tensor, expected_rank=None, name=None):
  """Returns the shape of `tensor` as a list: Python ints where static, scalar Tensors elsewhere."""
  if name is None:
    name = tensor.name

  if expected_rank is not None:
    assert_rank(tensor, expected_rank, name)

  shape = tensor.shape.as_list()

  non_static_indexes = []
  for (index, dim) in enumerate(shape):
    if dim is None:
      non_static_indexes.append(index)

  if not non_static_indexes:
    return shape

  dyn_shape = tf.shape(tensor)
  for index in non_static_indexes:
    shape[index] = dyn_shape[index]
  return shape


def reshape_to_matrix(input_tensor):
  """Reshapes a >= rank 2 tensor [..., width] to a rank 2 tensor [-1, width]."""
  ndims = input_tensor.shape.ndims
  if ndims < 2:
    raise ValueError("Input tensor must have at least rank 2. Shape = %s" % (input_tensor.shape))
  if ndims == 2:
    return input_tensor

  width = input_tensor.shape[-1]
  return tf.reshape(input_tensor, [-1, width])


def reshape_from_matrix(output_tensor, orig_shape_list):
  """Reshapes a rank 2 tensor [-1, width] back to `orig_shape_list[:-1] + [width]`."""
  if len(orig_shape_list) == 2:
    return output_tensor

  output_shape = get_shape_list(output_tensor)
  orig_dims = orig_shape_list[0:-1]
  width = output_shape[-1]
  return tf.reshape(output_tensor, orig_dims + [width])


def assert_rank(tensor, expected_rank, name=None):
  """Raises ValueError if the tensor's rank is not `expected_rank` (an int or a list of ints)."""
  if name is None:
    name = tensor.name

  expected_rank_dict = {}
  if isinstance(expected_rank, six.integer_types):
    expected_rank_dict[expected_rank] = True
  else:
    for x in expected_rank:
      expected_rank_dict[x] = True

  actual_rank = tensor.shape.ndims
  if actual_rank not in expected_rank_dict:
    scope_name = tf.get_variable_scope().name
    raise ValueError(
        "For the tensor `%s` in scope `%s`, the actual rank `%d` (shape = %s) is not equal to "
        "the expected rank `%s`" % (name, scope_name, actual_rank, str(tensor.shape),
                                    str(expected_rank)))


def stock_variable_shapes(config, with_pooler=True):
  """The variable names and shapes of a stock BERT encoder for `config`, in creation order.

  Returns:
    list of (name, shape) for every variable `BertModel` creates under scope "bert"; what the
    tests compare against and what a conversion script must produce.
  """
  h, i = config.hidden_size, config.intermediate_size
  shapes = [
      ("bert/embeddings/word_embeddings", [config.vocab_size, h]),
      ("bert/embeddings/token_type_embeddings", [config.type_vocab_size, h]),
      ("bert/embeddings/position_embeddings", [config.max_position_embeddings, h]),
      ("bert/embeddings/LayerNorm/beta", [h]),
      ("bert/embeddings/LayerNorm/gamma", [h]),
  ]
  for layer in range(config.num_hidden_layers):
    prefix = "bert/encoder/layer_%d/" % layer
    for proj in ("query", "key", "value"):
      shapes += [(prefix + "attention/self/%s/kernel" % proj, [h, h]),
                 (prefix + "attention/self/%s/bias" % proj, [h])]
    shapes += [
        (prefix + "attention/output/dense/kernel", [h, h]),
        (prefix + "attention/output/dense/bias", [h]),
        (prefix + "attention/output/LayerNorm/beta", [h]),
        (prefix + "attention/output/LayerNorm/gamma", [h]),
        (prefix + "intermediate/dense/kernel", [h, i]),
        (prefix + "intermediate/dense/bias", [i]),
        (prefix + "output/dense/kernel", [i, h]),
        (prefix + "output/dense/bias", [h]),
        (prefix + "output/LayerNorm/beta", [h]),
        (prefix + "output/LayerNorm/gamma", [h]),
    ]
  if with_pooler:
    shapes += [("bert/pooler/dense/kernel", [h, h]), ("bert/pooler/dense/bias", [h])]
  return shapes

