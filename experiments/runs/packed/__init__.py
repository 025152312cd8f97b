"""A packed group: K runs trained at once in one process, each leaving its own run folder."""
