"""The two messages of ``grpc.health.v1.Health/Check`` in protobuf wire format, by hand.

``numamem health`` is the DaemonSet's liveness probe: it runs every 10 s against a
``cpu: 50m`` request. The protobuf runtime and the generated ``grpc_health`` module cost
about as much CPU as the rest of the command beside grpc itself, for two messages of one
field each. So the command encodes ``HealthCheckRequest {string service = 1}`` and decodes
``HealthCheckResponse {ServingStatus status = 1}`` itself; ``tests/unit/test_cli_startup.py``
checks both against the generated ``grpc_health.v1.health_pb2`` code, whatever the service
name or the response's other fields.
"""

from __future__ import annotations

METHOD = "/grpc.health.v1.Health/Check"

STATUS_NAMES = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}
"""``HealthCheckResponse.ServingStatus``: number -> name."""
SERVING = 1

_VARINT, _I64, _LEN, _SGROUP, _EGROUP, _I32 = 0, 1, 2, 3, 4, 5


def encode_request(service: str) -> bytes:
    """``HealthCheckRequest(service=service).SerializeToString()``; raises UnicodeEncodeError
    for a name that is not UTF-8 text (protobuf refuses it too)."""
    data = service.encode("utf-8")
    return b"\x0a" + _varint(len(data)) + data if data else b""


def decode_response(data: bytes) -> int:
    """The ``status`` of a serialized ``HealthCheckResponse`` (0 when absent; the last one
    when repeated, as protobuf reads it); other fields (groups too) are skipped. Raises
    ValueError when ``data`` is not a protobuf message."""
    status = 0
    pos = 0
    while pos < len(data):
        field, wire, pos = _read_key(data, pos)
        if field == 1 and wire == _VARINT:
            value, pos = _read_varint(data, pos)
            status = _int32(value)
        elif wire == _EGROUP:
            raise ValueError(f"end of group {field} outside a group")
        else:
            pos = _skip(data, pos, field, wire)
    return status


def _read_key(data: bytes, pos: int, in_group: bool = False) -> tuple[int, int, int]:
    """(field number, wire type, the position after the key). As protobuf (upb): a key of
    more than 5 bytes or beyond 32 bits is refused; field number 0 is refused at the top
    level, but skipped like any other field inside a group being skipped."""
    start = pos
    key, pos = _read_varint(data, pos)
    if pos - start > 5:
        raise ValueError("key longer than 5 bytes")
    field, wire = key >> 3, key & 7
    if (field == 0 and not in_group) or field >= 1 << 29:
        raise ValueError(f"field number {field}")
    return field, wire, pos


def _skip(data: bytes, pos: int, field: int, wire: int, depth: int = 0) -> int:
    """The position after the value of ``field`` (of ``wire`` type) that starts at ``pos``."""
    if wire == _VARINT:
        return _read_varint(data, pos)[1]
    if wire == _SGROUP:
        if depth >= 100:
            raise ValueError("groups nested too deep")
        while True:
            inner, inner_wire, pos = _read_key(data, pos, in_group=True)
            if inner_wire == _EGROUP:
                if inner != field:
                    raise ValueError(f"group {field} ended by {inner}")
                return pos
            pos = _skip(data, pos, inner, inner_wire, depth + 1)
    if wire == _LEN:
        size, pos = _read_varint(data, pos)
        end = pos + size
    elif wire in (_I64, _I32):
        end = pos + (8 if wire == _I64 else 4)
    else:
        raise ValueError(f"wire type {wire} of field {field}")
    if end > len(data):
        raise ValueError("truncated message")
    return end


def _int32(value: int) -> int:
    """An enum is an int32 on the wire: negative values are sign-extended to 64 bits."""
    value &= (1 << 32) - 1
    return value - (1 << 32) if value >= 1 << 31 else value


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = 0
    for shift in range(0, 70, 7):
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
    raise ValueError("varint longer than 10 bytes")
