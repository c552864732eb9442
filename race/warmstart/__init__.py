"""warmstart: the tiny family RACE builds itself, so that the embedded default runs on a
CPU with no hub: its character tokenizer and the family's name (:mod:`~.tokenizer`), the
warm-started policies (:mod:`~.policies`), the tiny PRMs trained from them
(:mod:`~.prm`), building them all at once (:mod:`~.family`), and stand-ins: tiny
Hugging Face checkpoints with their own tokenizers for the real-model paths' tests
(:mod:`~.standin`). Everything is cached, built once.

May import: catalog, core, errors, nn, store, tasks.
"""
