"""Side effects: object stores and commit primitives."""
