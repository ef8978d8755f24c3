"""bertpre: pretrain BERT-style encoders from scratch."""
__version__ = "0.1.0"
