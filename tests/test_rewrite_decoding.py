"""rewrite_decoding: the cached incremental decoder against a full recompute, beam vs greedy."""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import modeling
from rewrite import decoding as rewrite_decoding
from rewrite import model as rewrite_model

VOCAB_SIZE = 40
SEQ_LENGTH = 18
MAX_TARGET = 7
PAD, CLS, SEP, MASK = 0, 1, 2, 3
SOURCES = [[11, 12, 13, 14, 15], [20, 21], [30, 31, 32, 33, 34, 35, 36, 37], [9],
           [25, 5, 17, 8], [4, 39, 38]]
SEP_BIAS = 2.0


def _config():
  # A large initializer range gives a random model peaked distributions, so argmaxes are not
  # decided by float rounding.
  return modeling.BertConfig(vocab_size=VOCAB_SIZE, hidden_size=32, num_hidden_layers=2,
                             num_attention_heads=4, intermediate_size=48,
                             max_position_embeddings=SEQ_LENGTH, initializer_range=0.3)


def _params(beam_size=1, length_penalty=0.0, no_repeat_ngram_size=0, min_target_length=0):
  return rewrite_decoding.DecodeParams(MAX_TARGET, min_target_length, beam_size,
                                       length_penalty, no_repeat_ngram_size, SEP,
                                       [PAD, CLS, MASK])


def _pack(source, target=()):
  """[CLS] source [SEP] target, padded: (ids, mask, segments) lists."""
  tokens = [CLS] + list(source) + [SEP] + list(target)
  segments = [0] * (len(source) + 2) + [1] * len(target)
  pad = [0] * (SEQ_LENGTH - len(tokens))
  return tokens + pad, [1] * len(tokens) + pad, segments + pad


def _batch(rows):
  return [np.array(column, np.int32) for column in zip(*rows)]


class _Model(object):
  """One graph holding the decoders and the full training model, sharing random variables."""

  def __init__(self, params_list):
    self.graph = tf.Graph()
    with self.graph.as_default():
      tf.set_random_seed(7)
      config = _config()
      self.ids, self.mask, self.seg = (tf.placeholder(tf.int32, [None, SEQ_LENGTH])
                                       for _ in range(3))
      with tf.variable_scope(tf.get_variable_scope(), reuse=tf.AUTO_REUSE):
        self.full = rewrite_model.create_rewrite_model(config, False, self.ids, self.mask,
                                                       self.seg, MAX_TARGET, all_slots=True)
      self.decoders = []
      for params in params_list:
        with tf.variable_scope(tf.get_variable_scope(), reuse=True):
          source = rewrite_decoding.encode_source(config, self.ids, self.mask, self.seg)
          search = (rewrite_decoding.beam_search if params.beam_size > 1 or params.force_beam
                    else rewrite_decoding.greedy_search)
          self.decoders.append(search(config, source, params.decode))
      self.sess = tf.Session(graph=self.graph)
      self.sess.run(tf.global_variables_initializer())
      # Favour [SEP] a little: some hypotheses then end early, others reach the length limit.
      output_bias = [v for v in tf.global_variables()
                     if v.op.name == "cls/predictions/output_bias"][0]
      self.sess.run(tf.scatter_update(output_bias, [SEP], [SEP_BIAS]))

  def feed(self, rows):
    ids, mask, seg = _batch(rows)
    return {self.ids: ids, self.mask: mask, self.seg: seg}

  def decode(self, index, sources):
    return self.sess.run(self.decoders[index], self.feed([_pack(s) for s in sources]))

  def full_recompute_greedy(self, sources):
    """Greedy decoding that reruns the whole sequence through the training model each step."""
    targets = [[] for _ in sources]
    finished = [False] * len(sources)
    for slot in range(MAX_TARGET + 1):
      log_probs = self.sess.run(self.full.log_probs, self.feed(
          [_pack(s, t) for s, t in zip(sources, targets)]))
      log_probs = log_probs.reshape([len(sources), MAX_TARGET + 1, VOCAB_SIZE])[:, slot]
      for row, target in enumerate(targets):
        if finished[row]:
          continue
        scores = log_probs[row].copy()
        scores[[PAD, CLS, MASK]] = -np.inf
        if slot == MAX_TARGET:
          return_sep = np.full_like(scores, -np.inf)
          return_sep[SEP] = scores[SEP]
          scores = return_sep
        target.append(int(np.argmax(scores)))
        finished[row] = target[-1] == SEP
    return targets

  def log_likelihood(self, sources, targets):
    out = self.sess.run(self.full, self.feed([_pack(s, t) for s, t in zip(sources, targets)]))
    return out.log_likelihood


class _P(object):

  def __init__(self, force_beam=False, **kwargs):
    self.decode = _params(**kwargs)
    self.beam_size = self.decode.beam_size
    self.force_beam = force_beam


@pytest.fixture(scope="module")
def model():
  return _Model([
      _P(),  # 0: greedy
      _P(force_beam=True),  # 1: beam search with beam_size=1
      _P(length_penalty=1.0, no_repeat_ngram_size=2),  # 2: greedy, constrained
      _P(force_beam=True, length_penalty=1.0, no_repeat_ngram_size=2),  # 3: beam 1, same
      _P(beam_size=3),  # 4: beam 3, no length penalty
      _P(beam_size=3, min_target_length=3),  # 5: beam 3, at least 3 tokens
  ])


def _tokens(output_ids):
  """Rows of output ids cut after [SEP]."""
  rows = []
  for row in output_ids.tolist():
    rows.append(row[:row.index(SEP) + 1] if SEP in row else row)
  return rows


@pytest.mark.graph_math
def test_cached_greedy_equals_full_recompute(model):
  output_ids, scores = model.decode(0, SOURCES)
  expected = model.full_recompute_greedy(SOURCES)
  assert _tokens(output_ids) == expected
  lengths = [len(t) for t in expected]
  assert min(lengths) < MAX_TARGET + 1 and max(lengths) == MAX_TARGET + 1, lengths
  # Scores (length_penalty 0) are the log-likelihoods under the full model.
  np.testing.assert_allclose(scores, model.log_likelihood(SOURCES, expected), rtol=1e-4,
                             atol=1e-4)


def test_beam_size_one_equals_greedy(model):
  for greedy_index, beam_index in ((0, 1), (2, 3)):
    greedy_ids, greedy_scores = model.decode(greedy_index, SOURCES)
    beam_ids, beam_scores = model.decode(beam_index, SOURCES)
    np.testing.assert_array_equal(greedy_ids, beam_ids)
    np.testing.assert_allclose(greedy_scores, beam_scores, rtol=1e-5, atol=1e-5)


def test_no_repeat_ngram_constraint(model):
  free = _tokens(model.decode(0, SOURCES)[0])
  constrained = _tokens(model.decode(2, SOURCES)[0])
  for tokens in constrained:
    bigrams = list(zip(tokens, tokens[1:]))
    assert len(bigrams) == len(set(bigrams)), tokens
  assert free != constrained  # the random model repeats itself, so the constraint bites


def test_beam_search_scores_and_bookkeeping(model):
  output_ids, scores = model.decode(4, SOURCES)
  targets = _tokens(output_ids)
  assert all(t[-1] == SEP and len(t) <= MAX_TARGET + 1 for t in targets)
  # The reported score of each beam winner is its log-likelihood under the full model: the
  # caches were reordered with the right parents.
  np.testing.assert_allclose(scores, model.log_likelihood(SOURCES, targets), rtol=1e-4,
                             atol=1e-4)


def test_min_target_length(model):
  free = _tokens(model.decode(4, SOURCES)[0])
  assert min(len(t) for t in free) == 1  # the [SEP]-biased model stops at once somewhere
  constrained = _tokens(model.decode(5, SOURCES)[0])
  assert all(len(t) >= 4 and SEP not in t[:3] for t in constrained), constrained


def test_repeated_ngram_bans():
  with tf.Graph().as_default(), tf.Session() as sess:
    sequences = tf.constant([[5, 6, 7, 5, 0, 0], [5, 6, 5, 6, 0, 0]], tf.int32)
    bigram = sess.run(rewrite_decoding._repeated_ngram_bans(sequences, 4, 2, 2, 10))
    trigram = sess.run(rewrite_decoding._repeated_ngram_bans(sequences, 4, 3, 2, 10))
  # Row 0 ends in 5; "5 6" was seen -> 6 banned. Row 1 ends in 6; "6 5" seen -> 5 banned.
  assert np.nonzero(bigram[0])[0].tolist() == [6]
  assert np.nonzero(bigram[1])[0].tolist() == [5]
  # Row 0 ends in "7 5": never seen before. Row 1 ends in "5 6": "5 6 5" seen -> 5 banned.
  assert np.nonzero(trigram[0])[0].tolist() == []
  assert np.nonzero(trigram[1])[0].tolist() == [5]
