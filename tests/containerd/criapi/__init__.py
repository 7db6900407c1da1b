"""Generated from api.proto by `make protos` (tests/genproto.py): the CRI runtime.v1 subset the harness uses."""
