"""Model layer: heads on top of modeling.BertModel, with the stock variable names.

- `pretraining.py`: the masked-LM head (tied to the word embeddings) and next-sentence head,
  `cls/predictions` and `cls/seq_relationship` as in Google's checkpoints. The pretraining
  objectives and the rewriter (which generates through the masked-LM head) share it.
"""
