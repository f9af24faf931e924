"""The memory kind: stores in memory, saved as snapshots."""
