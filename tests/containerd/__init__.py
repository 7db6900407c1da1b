"""The containerd test harness (see README.md here)."""
