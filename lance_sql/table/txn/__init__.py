"""Transactions: operations as data, applying them, conflict rules, rebasing, the commit
loop, and the write context every write commits through (:mod:`.writer`)."""
