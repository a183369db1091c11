"""Just enough of the protocol-buffer wire format to read the ONNX model's fields and
write a graph with some of its nodes changed, without the onnx package."""

from __future__ import annotations

from collections.abc import Iterator

from dreamd.errors import ModelFileError

VARINT, FIXED64, BYTES, FIXED32 = 0, 1, 2, 5


def spans(data: memoryview) -> Iterator[tuple[int, int | memoryview, memoryview]]:
    """(field number, value, the field's whole encoding) of one message, in order: a
    number for varints, the bytes for length-delimited fields (sub-messages, strings,
    tensors), the raw bytes for fixed-width ones."""
    at = 0
    unread = ModelFileError("the model file is not an ONNX model dreamd can read")

    def varint() -> int:
        nonlocal at
        value = shift = 0
        while True:
            if at >= len(data):
                raise unread
            byte = data[at]
            at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value

    while at < len(data):
        start = at
        key = varint()
        kind = key & 7
        value: int | memoryview
        if kind == VARINT:
            value = varint()
        elif kind == BYTES:
            size = varint()
            if at + size > len(data):
                raise unread
            value = data[at : at + size]
            at += size
        elif kind in (FIXED64, FIXED32):
            size = 8 if kind == FIXED64 else 4
            if at + size > len(data):
                raise unread
            value = data[at : at + size]
            at += size
        else:
            raise unread
        yield key >> 3, value, data[start:at]


def fields(data: memoryview) -> Iterator[tuple[int, int | memoryview]]:
    """(field number, value) of one message: a number for varints, the bytes for
    length-delimited fields (sub-messages, strings, tensors)."""
    for number, value, _ in spans(data):
        yield number, value


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def field(number: int, value: int | bytes) -> bytes:
    """One field's encoding: a varint, or length-delimited bytes."""
    if isinstance(value, int):
        return varint(number << 3 | VARINT) + varint(value)
    return varint(number << 3 | BYTES) + varint(len(value)) + value
