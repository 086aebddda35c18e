"""A serialized SentencePiece model read and edited as protobuf fields, without the protobuf
package (SentencePiece's Python binding reads and writes only whole models).

``ModelProto``: field 1 = repeated ``SentencePiece {1: piece, 2: score (float), 3: type}``,
field 2 = ``TrainerSpec`` (its field 4 = ``vocab_size``), then the normaliser specs. A piece's
id is its position among the field-1 entries.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence

NORMAL, UNUSED = 1, 5
PIECES, TRAINER_SPEC, VOCAB_SIZE = 1, 2, 4
_LEN, _FIXED32 = 2, 5


def read_varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def fields(buf: bytes) -> Iterator[tuple[int, int, int | bytes, bytes]]:
    """(field number, wire type, value, raw bytes) of each field of a protobuf message."""
    i = 0
    while i < len(buf):
        start = i
        key, i = read_varint(buf, i)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, i = read_varint(buf, i)
        elif wire == 1:
            value, i = buf[i : i + 8], i + 8
        elif wire == _FIXED32:
            value, i = buf[i : i + 4], i + 4
        elif wire == _LEN:
            n, i = read_varint(buf, i)
            value, i = buf[i : i + n], i + n
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        yield number, wire, value, buf[start:i]


def length_delimited(number: int, body: bytes) -> bytes:
    return varint((number << 3) | _LEN) + varint(len(body)) + body


def read_piece(message: bytes) -> tuple[str, float, int]:
    """(piece, score, type) of one ``SentencePiece`` message."""
    piece, score, kind = "", 0.0, NORMAL
    for n, _, v, _ in fields(message):
        if n == 1:
            assert isinstance(v, bytes)
            piece = v.decode("utf-8")
        elif n == 2:
            assert isinstance(v, bytes)
            score = struct.unpack("<f", v)[0]
        elif n == 3:
            assert isinstance(v, int)
            kind = v
    return piece, score, kind


def pieces(model_proto: bytes) -> list[tuple[str, float, int]]:
    """(piece, score, type) of every piece, in id order."""
    return [
        read_piece(value)
        for number, wire, value, _ in fields(model_proto)
        if number == PIECES and wire == _LEN and isinstance(value, bytes)
    ]


def _with_vocab_size(trainer_spec: bytes, size: int) -> bytes:
    out = bytearray()
    for number, _, _, raw in fields(trainer_spec):
        out += varint((VOCAB_SIZE << 3) | 0) + varint(size) if number == VOCAB_SIZE else raw
    return bytes(out)


def add_pieces(model_proto: bytes, new: Sequence[tuple[str, float]]) -> bytes:
    """A copy of the model with ``new`` (piece, score) appended as normal pieces: every piece
    it had keeps its id, the new ones take the next ids in order, and the trainer spec's
    vocabulary size follows."""
    known = {p for p, _, _ in pieces(model_proto)}
    clash = sorted(known & {p for p, _ in new})
    if clash or len({p for p, _ in new}) != len(new):
        raise ValueError(f"pieces already in the model or given twice: {clash[:10]}")
    added = b"".join(
        length_delimited(
            PIECES,
            length_delimited(1, piece.encode("utf-8"))
            + varint((2 << 3) | _FIXED32)
            + struct.pack("<f", score),
        )
        for piece, score in new
    )
    size = len(known) + len(new)
    out = bytearray()
    last_piece = max(
        i for i, (n, w, _, _) in enumerate(fields(model_proto)) if n == PIECES and w == _LEN
    )
    for i, (number, _, value, raw) in enumerate(fields(model_proto)):
        if number == TRAINER_SPEC:
            assert isinstance(value, bytes)
            out += length_delimited(TRAINER_SPEC, _with_vocab_size(value, size))
        else:
            out += raw
        if i == last_piece:
            out += added
    return bytes(out)
