"""The classifier's model: BERT's pooled output, dropout and one softmax layer (stock names).

`create_model` is stock google-research/bert's run_classifier.create_model; `make_tower_fn`
wraps it for the engine (training.train and inference.run_inference build one per tower).
build_saved_model.py and the benchmarks build the same model from here.

Variables: bert/... (modeling.BertModel) and output_weights [num_labels, H], output_bias
[num_labels], as in Google's fine-tuned checkpoints.

With class weights (--class_weights, classifier/weighting.py) the training loss is the weighted
mean sum_i w[y_i] ce_i / sum_i w[y_i] over the whole global batch: each tower divides its sum by
its share of the global batch's weight (tower_utils.GlobalBatch.loss_denominator), so the loss
does not depend on how the rows fall on the towers (nor on how many towers there are).
"""

import tensorflow.compat.v1 as tf

import modeling


def create_model(bert_config, is_training, input_ids, input_mask, segment_ids, labels,
                 num_labels, use_one_hot_embeddings=False):
  """BERT + a softmax layer on the pooled output (stock names output_weights/output_bias).

  Args:
    bert_config: BertConfig.
    is_training: dropout on.
    input_ids, input_mask, segment_ids: int32 Tensors [batch_size, max_seq_length].
    labels: int32 Tensor [batch_size].
    num_labels: number of classes.
    use_one_hot_embeddings: see BertModel.

  Returns:
    (loss scalar, per_example_loss [batch_size], logits [batch_size, num_labels],
     probabilities [batch_size, num_labels]).
  """
  model = modeling.BertModel(
      config=bert_config, is_training=is_training, input_ids=input_ids, input_mask=input_mask,
      token_type_ids=segment_ids, use_one_hot_embeddings=use_one_hot_embeddings)
  output_layer = model.get_pooled_output()
  hidden_size = output_layer.shape[-1]

  output_weights = tf.get_variable(
      "output_weights", [num_labels, hidden_size],
      initializer=tf.truncated_normal_initializer(stddev=0.02))
  output_bias = tf.get_variable("output_bias", [num_labels], initializer=tf.zeros_initializer())

  with tf.variable_scope("loss"):
    output_layer = modeling.dropout(output_layer, 0.1 if is_training else 0.0)
    logits = tf.nn.bias_add(tf.matmul(output_layer, output_weights, transpose_b=True),
                            output_bias)
    probabilities = tf.nn.softmax(logits, axis=-1)
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    one_hot_labels = tf.one_hot(labels, depth=num_labels, dtype=tf.float32)
    per_example_loss = -tf.reduce_sum(one_hot_labels * log_probs, axis=-1)
    loss = tf.reduce_mean(per_example_loss)
    return (loss, per_example_loss, logits, probabilities)


def weighted_loss(per_example_loss, labels, class_weights, global_batch):
  """The class-weighted cross-entropy of a tower, normalised over the whole global batch.

  Args:
    per_example_loss: float32 [rows], each row's cross-entropy.
    labels: int32 [rows], each row's class id.
    class_weights: list of num_labels floats.
    global_batch: tower_utils.GlobalBatch.

  Returns:
    float32 scalar: sum of w[y] * loss over the tower's rows / the tower's share of sum of
    w[y] over the global batch (0 when no row of the global batch has weight).
  """
  weights = tf.constant(class_weights, tf.float32)

  def total_weight(features):
    return tf.reduce_sum(tf.gather(tf.constant(class_weights, tf.float32),
                                   features["label_ids"]))

  row_weights = tf.gather(weights, labels)
  return tf.math.divide_no_nan(tf.reduce_sum(row_weights * tf.cast(per_example_loss, tf.float32)),
                               global_batch.loss_denominator(total_weight))


def make_tower_fn(bert_config, num_labels, is_training, class_weights=None):
  """tower_fn for training.train / run_inference: features -> (loss, outputs).

  Args:
    class_weights: None (the mean cross-entropy) or one weight per label (weighted_loss).

  The outputs: per_example_loss [rows] (plain cross-entropy), probabilities and logits
  [rows, num_labels].
  """

  def tower_fn(features, global_batch):
    loss, per_example_loss, logits, probabilities = create_model(
        bert_config, is_training, features["input_ids"], features["input_mask"],
        features["segment_ids"], features["label_ids"], num_labels)
    # Without weights, a mean over rows: the towers' rows are equal, so their mean is global.
    if class_weights is not None:
      loss = weighted_loss(per_example_loss, features["label_ids"], class_weights,
                           global_batch)
    return loss, {"per_example_loss": per_example_loss, "probabilities": probabilities,
                  "logits": logits}

  return tower_fn
