"""Sessions without Grappler, for the tests that compare the values of graphs built two ways.

Grappler, TensorFlow's graph optimizer, rewrites a graph the first time a Session runs a set of
fetches (folds constants, fuses ops, prunes control edges it proves useless). On the tiny
models of the equivalence tests (n towers against one, stages against the unsplit model,
recomputation against none) it costs more than the steps themselves: on the AVX2 host the
first run of a 4-tower update (tests/multiworker_case.py, one process) took 2.9 s of CPU with it
and 0.5 s without, and all the Session runs of that case 4.9 s and 1.4 s.
Its rewrites keep the values a graph computes, which is all these tests compare (to 1e-5 or
closer), so they run without it: a test (or file) marked `graph_math` gets Sessions whose
config sets `disable_meta_optimizer` (tests/conftest.py); so do the multi-process cases of
tests/multiworker_case.py.

Everything else keeps Grappler, as a user's run has it: every script run (forked from the
script host or a fresh process), and the tests of what Grappler can change: placement and the
devices kernels ran on, peak memory, execution order, traces, exports. The scripts' tests also
train the same modes (towers, stages, recomputation, several processes) under Grappler.
"""

import contextlib

import tensorflow.compat.v1 as tf
from tensorflow.python.client import session as session_lib
from tensorflow.python.eager import context


@contextlib.contextmanager
def grappler_off():
  """Within the block, every new Session runs its graphs without Grappler's rewrites."""
  original = session_lib.BaseSession.__init__

  def init(self, target="", graph=None, config=None):
    changed = tf.ConfigProto()
    changed.CopyFrom(config if config is not None else context.context().config)
    changed.graph_options.rewrite_options.disable_meta_optimizer = True
    original(self, target, graph, changed)

  session_lib.BaseSession.__init__ = init
  try:
    yield
  finally:
    session_lib.BaseSession.__init__ = original
