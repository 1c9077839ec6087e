"""Sets many variables at once, for tests that start a graph from given weights."""


def load(sess, values):
  """Sets each variable of `values` ({tf.Variable: numpy value}) in one sess.run.

  It is what Variable.load does for one variable (its initializer, fed the value), for all of
  them at once: each sess.run with new fetches prepares the graph anew (Grappler, partitions),
  which on the tests' small models costs more than the run, so 40 loads took 2 s of CPU.
  """
  if not values:
    return
  feed = {v.initializer.inputs[1]: value for v, value in values.items()}
  assert len(feed) == len(values), "variables sharing an initial value cannot be fed apart"
  sess.run([v.initializer for v in values], feed)
