"""The SQLite backend: every store of a bot in SQLite files under one directory, one module per store."""
