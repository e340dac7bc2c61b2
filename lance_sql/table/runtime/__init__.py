"""Process-wide machinery a table read or write runs on: bounded caches and worker pools."""
