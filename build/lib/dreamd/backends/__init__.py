"""Backends: the Completer and Embedder protocols and their implementations."""
