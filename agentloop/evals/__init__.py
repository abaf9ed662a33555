"""Evaluating a bot: `learning` measures the learning curve of note-taking."""
