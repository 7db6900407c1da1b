"""Generated protobuf code for the NRI API and the ttrpc envelope (built from proto/numamem/nriapi).

``api_pb2``: the ``nri.pkg.api.v1alpha1`` messages numamem's NRI plugin uses, with
upstream's names and field numbers; ``ttrpc_pb2``: ttrpc's Request/Response envelope.
Regenerate with ``make protos``; never edit by hand.
"""
