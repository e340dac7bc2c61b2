"""Versions of a table: listing and loading manifests, tags, and time travel."""
