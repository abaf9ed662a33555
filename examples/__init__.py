"""Runnable examples that live beside the package, run from the checkout's root."""
