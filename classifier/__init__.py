"""Sentence(-pair) classification, the feature behind run_classifier_mgpu.py.

- `data.py`: the stock GLUE/XNLI processors, the generic TSV task, features and their cache.
- `model.py`: BERT + a softmax on the pooled output (stock names) and its tower function.
- `windows.py`: long documents as sliding windows, pooled back to one row per document.
- `weighting.py`: --class_weights (checked lists, balanced weights) for imbalanced labels.
- `metrics.py`: accuracy, per-class precision/recall/F1 and MCC for eval_results.txt.

Imports the engine and the model layer only.
"""
