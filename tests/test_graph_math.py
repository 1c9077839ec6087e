"""tests/graph_math.py: the `graph_math` tests' Sessions run without Grappler, the others with."""

import pytest
import tensorflow.compat.v1 as tf

import graph_math
import tower_utils


def _runs_the_transposes(config):
  """Whether a Session with `config` runs both transposes of transpose(transpose(x)): Grappler's
  arithmetic optimizer removes the pair (TensorFlow's own graph optimizer keeps it)."""
  with tf.Graph().as_default(), tf.Session(config=config) as sess:
    x = tf.placeholder(tf.float32, [2, 3], name="x")
    y = tf.transpose(tf.transpose(x, name="inner"), name="outer") * 2.0
    metadata = tf.RunMetadata()
    value = sess.run(y, {x: [[1, 2, 3], [4, 5, 6]]},
                     options=tf.RunOptions(output_partition_graphs=True), run_metadata=metadata)
    assert value.tolist() == [[2, 4, 6], [8, 10, 12]]
    ran = {node.name for graph in metadata.partition_graphs for node in graph.node}
    return {"inner", "outer"} <= ran


def test_grappler_is_off_inside_the_block_only():
  config = tower_utils.session_config(2)
  assert not _runs_the_transposes(config)
  with graph_math.grappler_off():
    assert _runs_the_transposes(config)
    assert _runs_the_transposes(None)
  assert not _runs_the_transposes(config)


def test_the_block_keeps_the_rest_of_the_config():
  with graph_math.grappler_off():
    with tf.Session(config=tower_utils.session_config(3)) as sess:
      devices = [d.name for d in sess.list_devices() if d.device_type == "CPU"]
      assert len(devices) == 3, devices


@pytest.mark.graph_math
def test_a_graph_math_test_runs_without_grappler():
  assert _runs_the_transposes(tower_utils.session_config(2))


def test_other_tests_run_with_grappler():
  assert not _runs_the_transposes(tower_utils.session_config(2))
