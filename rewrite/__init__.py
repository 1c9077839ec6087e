"""Text rewriting with one BERT (UniLM-style seq2seq), the feature behind run_rewrite_finetune.py.

- `data.py`: TSV pairs, packing into one sequence, caching.
- `model.py`: the seq2seq attention mask, labels and loss on an unchanged BertModel.
- `decoding.py`: in-graph greedy and beam search with a key/value cache.
- `metrics.py`: character-level BLEU-4, ROUGE-L and exact match.

Imports the engine and the model layer only.
"""
