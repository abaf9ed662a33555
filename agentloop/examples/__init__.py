"""Small runnable examples; `greeting` is the README's bot."""
