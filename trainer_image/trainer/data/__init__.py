"""Where samples come from and in what order: sources, the map-style JSONL reader, token shards, the
rank-sharded streaming reader, the loader that joins them."""
