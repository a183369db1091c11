"""The six jobs; each: short read → pure prompt → backend call (no transaction) → write."""
