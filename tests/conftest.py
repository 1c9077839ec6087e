"""Test setup: repo root on sys.path, deterministic CPU kernels, quiet TensorFlow."""

import os
import sys

# Must be set before TensorFlow is imported: oneDNN's reordered float sums would otherwise make
# the tower-equivalence tests compare results of different summation orders.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

import tensorflow.compat.v1 as tf  # pylint: disable=g-import-not-at-top,wrong-import-position

tf.disable_v2_behavior()

import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position
from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top


@pytest.fixture(autouse=True)
def _absl_info_logging():
  """Every test starts with absl at INFO: scripts' main() calls (run in-process by some tests)
  change the verbosity, and log-reading tests must not depend on which test ran before."""
  absl_logging.set_verbosity(absl_logging.INFO)
  yield
