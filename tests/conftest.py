"""Test setup: repo root on sys.path, deterministic CPU kernels, quiet TensorFlow."""

import os
import sys

# Must be set before TensorFlow is imported: oneDNN's reordered float sums would otherwise make
# the tower-equivalence tests compare results of different summation orders.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

# As the scripts do: TensorFlow's pre-logging lines on import go to /dev/null (with test workers
# they would reach the terminal).
from engine import tf_env  # pylint: disable=g-import-not-at-top,wrong-import-position,unused-import
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


# The fast tier (`bash scripts/test.sh --fast`, `pytest -m fast`): quick unit tests of every
# module and one end-to-end run of each run script, under 3 minutes on 2 cores. "*" takes a
# whole file; otherwise the test functions named (with all their parameters).
# tests/test_fast_tier.py checks that these files reach every module of the project.
FAST_TESTS = {
    "test_layout.py": "*",
    "test_docs_links.py": "*",
    "test_feature_modules.py": "*",
    "test_writes_whole.py": "*",
    "test_fast_tier.py": "*",
    "test_tokenization.py": "*",
    "test_masking.py": "*",
    "test_domain_masking.py": ["test_weights_follow", "test_mask_rate_per_sequence",
                               "test_domain_words_are_masked", "test_whole_words_are_never",
                               "test_records_and_dynamic_masking", "test_chinese_words",
                               "test_bad_lists", "test_bad_settings", "test_build_word_freq",
                               "test_domain_vocab_", "test_a_checkpoint_is_read"],
    "test_optimization.py": "*",
    "test_placement_audit.py": ["test_bad_arguments_are_one_error_line",
                                "test_the_audit_finds_an_unplaced_reader",
                                "test_an_all_reduce_moves", "test_a_gpu_kernel_is_looked_up",
                                "test_the_tools_parser_raises", "test_a_tool_run_is_one"],
    "test_long_text.py": ["test_window_starts", "test_a_long_text_becomes",
                          "test_window_logits_pool_back"],
    "test_class_weights.py": ["test_weighted_loss", "test_two_towers_give",
                              "test_balanced_weights_and_lists", "test_malformed_weight_lists"],
    "test_cluster.py": "*",
    "test_rewrite_metrics.py": "*",
    "test_rewrite_data.py": "*",
    "test_rewrite_model.py": "*",
    "test_modeling.py": "*",
    "test_length_batching.py": "*",
    "test_divergence.py": ["test_a_noisy_normal_curve_is_never_abnormal",
                           "test_the_onset_is_the_first_abnormal_update",
                           "test_the_gradient_norm_alone_can_mark_the_onset"],
    "test_classifier.py": ["test_train_eval_predict_outputs", "test_matthews_correlation",
                           "test_predict_txt_has_one_label_per_test_row_in_order",
                           "test_truncation_modes", "test_tsv_task_layouts"],
    "test_run_pretraining.py": ["test_train_resume_eval_predict_then_continue_on_dynamic_records",
                                "test_heads_have_stock_names_and_shapes",
                                "test_masked_lm_loss_is_the_stock_weighted_mean",
                                "test_input_file_forms_and_no_match",
                                "test_bad_input_exits_2_with_one_error_line"],
    "test_create_pretraining_data.py": ["test_static_records_parse_with_stock_spec",
                                        "test_cli_error_is_one_line_with_exit_code_2",
                                        "test_tfrecord_framing_is_read_back_by_tensorflow"],
    "test_rewrite_script.py": ["test_malformed_row_is_a_one_line_error"],
    "test_electra.py": ["test_one_copy_of_each_shared_embedding",
                        "test_loss_is_generator_plus_weighted_discriminator_loss",
                        "test_roc_auc_matches_pair_counting"],
    "test_export.py": ["test_exported_classifier_reproduces_test_results_and_predict_txt",
                       "test_graph_tokenizer_gives_full_tokenizer_ids",
                       "test_graph_detokenizer_gives_rewrite_text",
                       "test_pair_budgets_closed_form_equals_the_stock_loop"],
    "test_convert_to_hf.py": ["test_hf_to_stock_to_hf_gives_the_same_tensors_bit_for_bit"],
    "test_electra_parity.py": "*",
    "test_electra_pipeline.py": ["test_two_stages_update_like_the_unsplit_electra"],
    "test_electra_prior.py": ["test_the_prior_loss_is_the_binary_entropy",
                              "test_at_prior_needs_the_prior_loss",
                              "test_output_spread_from_per_example_sums"],
    "test_towers.py": ["test_n_towers_equal_one_tower_with_the_whole_batch",
                       "test_fewer_than_one_tower_is_an_input_error"],
    "test_pipeline.py": ["test_pipeline_flags_that_do_not_divide_are_one_line_errors",
                         "test_bert_base_stages_hold_balanced_parameters"],
    "test_macbert.py": ["test_file_keeps_same_piece_neighbours_only",
                        "test_build_similar_words_without_gensim_is_one_line"],
    "test_bench_tools.py": ["test_isa_level_follows_the_onednn_cap",
                            "test_theoretical_peak_is_cores_times_clock_times_flops_per_cycle"],
    "test_finetune_features.py": ["test_num_train_steps_replaces_the_epochs_when_given",
                                  "test_evaluation_flags_that_cannot_work_are_refused"],
    "test_speed_features.py": ["test_speed_flags_reach_the_train_spec_and_the_global_batch"],
    "test_word_loss.py": ["test_the_batch_masks_every_piece_of_the_word_and_labels_them",
                          "test_ranks_share_ties",
                          "test_a_scores_file_for_another_vocabulary_or_malformed_is_refused"],
}


# The whole suite and the fast tier run in worker processes that each take whole files
# (scripts/test.sh: pytest-xdist, --dist loadfile), handed out in collection order. The longest
# files (measured with --durations, see docs/development.md) come first, so that no worker is
# still busy with a long file at the end while the other waits.
LONGEST_FIRST = ["test_faults.py", "test_export.py", "test_pipeline.py",
                 "test_multiworker_scripts.py", "test_recompute.py", "test_head_first.py",
                 "test_multiworker.py", "test_rewrite_script.py", "test_quiet_scripts.py",
                 "test_speed_features.py", "test_electra_pipeline.py", "test_divergence.py",
                 "test_long_text.py"]


def pytest_configure(config):
  config.addinivalue_line("markers", "fast: the fast tier (bash scripts/test.sh --fast)")
  config.addinivalue_line("markers", "graph_math: compares the values of graphs built two "
                          "ways; its Sessions run without Grappler (tests/graph_math.py)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
  """A `graph_math` test runs (its fixtures' set-up and teardown too) without Grappler."""
  del nextitem
  if item.get_closest_marker("graph_math"):
    import graph_math  # pylint: disable=g-import-not-at-top
    with graph_math.grappler_off():
      yield
  else:
    yield


def pytest_collection_modifyitems(config, items):
  """Marks the tests of FAST_TESTS with `fast`; puts the files of LONGEST_FIRST first."""
  del config
  rank = lambda item: (LONGEST_FIRST.index(os.path.basename(str(item.fspath)))
                       if os.path.basename(str(item.fspath)) in LONGEST_FIRST
                       else len(LONGEST_FIRST))
  items.sort(key=rank)  # Stable: the files' own order stays.
  for item in items:
    chosen = FAST_TESTS.get(os.path.basename(str(item.fspath)))
    name = item.originalname if hasattr(item, "originalname") else item.name
    if chosen == "*" or (chosen and any(name.startswith(prefix) for prefix in chosen)):
      item.add_marker(pytest.mark.fast)


def pytest_sessionfinish(session, exitstatus):
  """Ends the script host that forked the session's script runs (tests/script_runner.py)."""
  del session, exitstatus
  import script_runner  # pylint: disable=g-import-not-at-top
  script_runner.close_host()
