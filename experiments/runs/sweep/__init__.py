"""A sweep: specs expanded into runs, launched locally or on a cluster, resumably, with progress and estimates."""
