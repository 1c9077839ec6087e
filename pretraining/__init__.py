"""Pretraining: objectives and their data, behind run_pretraining_mgpu.py and create_pretraining_data.py.

Objectives (each implements `objective.py`'s Objective, the contract run_pretraining_mgpu.py uses):
- `objective.py`: the base class whose docstring is that contract, with its defaults.
- `mlm.py`: BERT's masked LM (+ next-sentence prediction).
- `electra.py` with `electra_model.py`: ELECTRA's replaced-token detection.

Data:
- `records.py`: the TFRecord layouts (static, static without NSP, dynamic), their detection and
  their input_fn (dynamic masking at train time).
- `masking.py`: masked-LM masking (token, whole-word, n-gram; MacBERT-style replacement).
- `similar_words.py`: the similar-word table of MacBERT-style replacement.
- `corpus.py`, `instances.py`, `record_writer.py`: raw text -> documents and chunks -> NSP or
  packed instances -> TFRecords, the library behind create_pretraining_data.py (no TensorFlow).

Imports the engine and the model layer only.
"""
