"""Checkpoints: the atomic file store, FNV-1a, go-spew rendering, Go-compatible JSON,
and the kubelet ``memory_manager_state`` codec."""
