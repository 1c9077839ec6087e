"""Pretraining objectives and their data, behind run_pretraining_mgpu.py and create_pretraining_data.py.

- `masking.py`: masked-LM masking (token, whole-word, n-gram; MacBERT-style replacement), used
  offline by create_pretraining_data.py and at train time (dynamic masking).
- `similar_words.py`: the similar-word table of MacBERT-style replacement.
- `records.py`: the TFRecord layouts (static, static without NSP, dynamic) and their detection.
- `electra_model.py`: ELECTRA's generator and discriminator on BERT's variables.
- `electra.py`: the ELECTRA objective (tower function, metrics, predict lines).

Imports the engine and the model layer only.
"""
