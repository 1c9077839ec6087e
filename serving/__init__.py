"""Serving: a trained run as a SavedModel that takes raw text, and as a Hugging Face model.

- `saved_model_export.py`: --do_export; collects the run's spec and runs build_saved_model.py.
- `graph_tokenizer.py`: BERT's WordPiece tokenizer (and detokenizer) as TensorFlow ops.
- `graph_features.py`: the run scripts' truncation and packing as TensorFlow ops.
- `huggingface.py`: Hugging Face <-> stock checkpoints, the front (convert_hf_checkpoint.py and
  convert_to_hf.py are its command lines): `hf_to_stock` and `stock_to_hf` pick the family.
- `hf_bert.py`, `hf_electra.py`: one model family each, both directions ("hf" is a transformers
  folder, "stock" a checkpoint of ours under Google BERT's names); BERT's holds the classifier's
  labels (`read_labels`).
- `hf_common.py`: what the families share (the two sides' folders and configs).
- `safetensors_io.py`: the safetensors format, read and written.

Imports the engine and the model layer only. The SavedModel modules themselves live in the root
tool build_saved_model.py, because they join two features' graphs (classifier/model.py and
rewrite/decoding.py) and features never import each other.
"""
