"""The learning-curve example: a dataset and a bot whose scripted model reads the notes in its prompt."""
