"""Versions of a table: listing and loading manifests, tags, time travel, and the
field ids a table has used."""
