"""Transactions: operations as data, applying them, conflict rules, rebasing and the commit
loop."""
