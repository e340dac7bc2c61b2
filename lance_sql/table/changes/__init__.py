"""The change data feed: which rows each version inserted, updated and deleted."""
