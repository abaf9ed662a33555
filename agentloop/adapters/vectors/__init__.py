"""Vector indexes: hnswlib, and the index partitioned by tenant chain that the SQLite stores search."""
