"""Generated protobuf and gRPC code for the numamem.v1 API (built from proto/)."""
