"""The pretraining objective: everything run_pretraining_mgpu.py asks of one (base class Objective).

The masked LM (mlm.MaskedLmObjective) and ELECTRA (electra.ElectraObjective) implement it; a new
objective subclasses Objective, fills in the four members without a default and is trained,
evaluated, predicted and exported by run_pretraining_mgpu.py like those two
(docs/pretraining.md, "Writing a new objective").
"""


class Objective(object):
  """A pretraining objective of run_pretraining_mgpu.py. This docstring is the whole contract.

  The script builds one objective from its flags (with the model's modeling.BertConfig) and then
  uses only the members below, in this order: run_identity() when it checks --output_dir's
  run_info.json; init_companions() and tower_fn_builder(has_nsp, True) for training.train;
  export_scopes and export_writes() for export/ (checkpoints.export_model); when
  diagnose_after_training, tower_fn_builder(False, False) and evaluation_metrics() on the first
  diagnostic_examples training examples, handed to check_trained(); for --do_eval and
  --do_predict, tower_fn_builder(has_nsp, False) for inference.run_inference, example_count()
  for the log, evaluation_metrics() for eval_results.txt and prediction_lines() for predict.txt.

  The features a tower gets (pretraining/records.py, the same for every record layout, dynamic
  records masked on the fly): input_ids, input_mask, segment_ids int32 [rows, L];
  masked_lm_positions, masked_lm_ids int32 and masked_lm_weights float32 [rows, P] (1.0 for a
  real prediction slot, 0.0 for padding; input_ids holds the corrupted token at each real slot:
  [MASK], a random or similar word, or the original); and, when the records have it,
  next_sentence_labels int32 [rows, 1] (0: B follows A).

  Must be given (no default):
    name: str, the --objective value; run_info.json records it.
    tower_fn_builder(has_nsp, is_training): see its docstring.
    evaluation_metrics(outputs), prediction_lines(outputs, inv_vocab): see theirs.

  Have a default (override when the objective needs more):
    uses_nsp, diagnose_after_training, diagnostic_examples, export_scopes, run_identity(),
    init_companions(), export_writes(), check_trained(), example_count().

  Variables: the encoder is modeling.BertModel under the stock `bert/` names (so export/ loads
  in the classifier and in stock BERT); an objective's heads live under scopes of its own, and
  what an --init_checkpoint lacks (a new head) starts from its initializer, learning first
  while the restored weights wait (--head_first_steps, engine/head_first.py). On pipeline
  stages modeling.BertModel names its parts to the stage placer; whatever the tower builds
  around it (heads, losses) runs on the last stage. An objective never learns how many towers,
  processes or stages there are: global_batch gives it the counts of the whole batch.
  """

  name = None
  # Whether the objective trains next-sentence prediction when the records have its labels; when
  # False, tower_fn_builder always gets has_nsp=False.
  uses_nsp = False
  # Whether run_pretraining_mgpu.py scores the trained model on the first diagnostic_examples
  # training examples (evaluation_metrics) and hands the metrics to check_trained.
  diagnose_after_training = False
  diagnostic_examples = 256
  # The variable scopes export/bert_model.ckpt holds (checkpoints.export_model): by default the
  # encoder alone, what fine-tuning reads.
  export_scopes = ("bert/",)

  def __init__(self, bert_config):
    """bert_config: the modeling.BertConfig of the model (--bert_config_file)."""
    self.bert_config = bert_config

  def run_identity(self):
    """What run_info.json records of the objective: a dict of JSON values.

    A resume or an eval of --output_dir with a different identity is refused (one error line),
    and every process of a multi-process run must have the same. Add every setting that changes
    the model or its loss (ELECTRA adds its generator config and disc_weight).
    """
    return {"objective": self.name}

  def tower_fn_builder(self, has_nsp, is_training):
    """The model of one tower, for training.train (is_training) or inference.run_inference.

    Args:
      has_nsp: bool, the records have next_sentence_labels and the objective uses_nsp (and, for
        inference, the checkpoint has a next-sentence head); False for the check after
        training.
      is_training: bool, dropout on and a loss to minimise; else dropout off and outputs.

    Returns:
      tower_fn(features, global_batch) -> (loss, outputs), called once per tower (and pipeline
      micro-batch) inside one graph; features are this tower's rows (see the class docstring),
      global_batch a tower_utils.GlobalBatch.
      - Training: loss is a float32 scalar, averaged over the global batch: a loss summed over
        tokens divides by global_batch.loss_denominator(count_fn), count_fn(features) ->
        float32 scalar (e.g. heads.pretraining.masked_token_count), never by this tower's own
        count. outputs holds the training metrics only: name training.METRIC_PREFIX + name ->
        training.metric(numerator, denominator), a float32 [2] that the loop sums over towers
        and steps and logs as numerator / denominator (e.g. masked_lm_accuracy); {} for none.
      - Inference: loss is None; outputs is a dict name -> Tensor [rows, ...], one row per
        example (run_inference returns them as numpy arrays [examples, ...] in input order),
        holding what evaluation_metrics and prediction_lines need.
    """
    raise NotImplementedError("%s has no tower_fn_builder" % type(self).__name__)

  def init_companions(self, init_checkpoint):
    """More checkpoints to restore from at the start of training (training.TrainSpec).

    Args:
      init_checkpoint: --init_checkpoint, or None.

    Returns:
      a tuple of (checkpoint prefix, variable scope) pairs: the variables under each scope are
      restored from that checkpoint (ELECTRA's generator, saved beside its discriminator). The
      default, (): --init_checkpoint alone restores what it has.
    """
    del init_checkpoint
    return ()

  def export_writes(self, output_dir):
    """What export/ holds beyond export_scopes' weights, bert_config.json and the vocabulary.

    Args:
      output_dir: the run's --output_dir; its latest checkpoint is the trained model.

    Returns:
      a list of atomic_files' (path, write_fn) pairs, written together with the rest of
      export/ (ELECTRA's generator in export/generator/). The default: [].
    """
    del output_dir
    return []

  def example_count(self, outputs):
    """The number of examples in run_inference's `outputs` (every output has one row each)."""
    return len(next(iter(outputs.values())))

  def evaluation_metrics(self, outputs):
    """eval_results.txt, from tower_fn's inference outputs.

    Args:
      outputs: dict name -> numpy array [examples, ...] (inference.run_inference).

    Returns:
      dict metric name -> number (the script adds global_step), with "loss", the training loss
      measured on these examples; a "warning" entry (str) is also logged.
    """
    raise NotImplementedError("%s has no evaluation_metrics" % type(self).__name__)

  def prediction_lines(self, outputs, inv_vocab):
    """predict.txt: one line per example, in input order.

    Args:
      outputs: dict name -> numpy array [examples, ...] (inference.run_inference).
      inv_vocab: dict token id -> token.

    Yields:
      str lines without newline (may be empty), as many as there are examples.
    """
    raise NotImplementedError("%s has no prediction_lines" % type(self).__name__)

  def check_trained(self, results, output_dir, source):
    """Called after training when diagnose_after_training: says in the log (and in export/)
    when the trained model is not what fine-tuning should start from (ELECTRA at the prior).

    Args:
      results: evaluation_metrics of the trained model on the first diagnostic_examples
        training examples.
      output_dir: the run's --output_dir (export/ is in it).
      source: what the results were measured on, for messages.
    """
    del results, output_dir, source
