"""The sysadvisor metadata cache (katalyst-core MetaCache semantics), its checkpoint and metrics."""
