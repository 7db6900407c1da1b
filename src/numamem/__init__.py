"""numamem: a node-local NUMA memory manager and metadata cache served over gRPC."""

__all__ = ["__version__"]

__version__ = "0.1.0"
