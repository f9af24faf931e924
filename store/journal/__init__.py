"""The journal kind: queues in the store log, messages in per-queue journals."""
