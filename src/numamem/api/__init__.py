"""gRPC edge of the daemon: servicers, validation, status mapping, bootstrap, interceptors."""
