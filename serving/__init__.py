"""Serving: a trained run as a SavedModel that takes raw text, behind --do_export and build_saved_model.py.

- `saved_model_export.py`: --do_export; collects the run's spec and calls build_saved_model.py.
- `graph_tokenizer.py`: BERT's WordPiece tokenizer (and detokenizer) as TensorFlow ops.
- `graph_features.py`: the run scripts' truncation and packing as TensorFlow ops.

Imports the engine and the model layer only.
"""
