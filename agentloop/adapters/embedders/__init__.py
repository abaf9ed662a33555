"""Embedders: the hashing default, OpenAI-compatible embeddings and sentence-transformers."""
