"""Language models: the HTTP layer the providers share, OpenAI-compatible and Anthropic servers, and the scripted model."""
