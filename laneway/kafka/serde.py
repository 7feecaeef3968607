"""Serializers for record keys and values: JSON (orjson), bytes and str, pluggable.

A serializer is any object with ``serialize(value) -> bytes | None`` and
``deserialize(data) -> value`` (the :class:`Serde` protocol). ``None`` passes through
both ways, so tombstones and null keys stay null. Pick a built-in one by name with
:func:`resolve` (``"json"``, ``"bytes"``, ``"str"``) or pass your own.

These objects are not a handler's ``deserializer`` option: ``@app.handler(...,
deserializer="json")`` dead-letters a null value (a tombstone) as not JSON (reason
``deserialize``); a handler that takes tombstones passes a function of its own.

Errors::

    SerdeError                 root of this module's errors (a LanewayError and a ValueError)
    ├── SerializationError     a value could not be turned into bytes
    └── DeserializationError   bytes could not be read back; keeps the raw data
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

import orjson

from laneway.errors import LanewayError

__all__ = [
    "BytesSerde",
    "DeserializationError",
    "JsonSerde",
    "Serde",
    "SerdeError",
    "SerdeName",
    "SerializationError",
    "StrSerde",
    "resolve",
]

SerdeName = Literal["json", "bytes", "str"]


class SerdeError(LanewayError, ValueError):
    """A value or a record could not be converted."""


class SerializationError(SerdeError):
    """A value could not be serialized; the original exception is the cause."""

    def __init__(self, message: str, value: object) -> None:
        super().__init__(message)
        self.value = value


class DeserializationError(SerdeError):
    """Bytes could not be deserialized; ``data`` keeps the raw bytes."""

    def __init__(self, message: str, data: bytes) -> None:
        super().__init__(message)
        self.data = data


@runtime_checkable
class Serde(Protocol):
    """Turns values into bytes and back. Both methods must pass ``None`` through."""

    def serialize(self, value: Any) -> bytes | None: ...

    def deserialize(self, data: bytes | None) -> Any: ...


class JsonSerde:
    """JSON through orjson; keys of dicts must be strings. ``sort_keys`` gives stable bytes."""

    def __init__(self, *, sort_keys: bool = False) -> None:
        self._option = orjson.OPT_SORT_KEYS if sort_keys else 0

    def serialize(self, value: Any) -> bytes | None:
        if value is None:
            return None
        try:
            return orjson.dumps(value, option=self._option)
        except TypeError as exc:  # orjson.JSONEncodeError is a TypeError
            raise SerializationError(f"cannot encode {type(value).__name__} as JSON: {exc}", value) from exc

    def deserialize(self, data: bytes | None) -> Any:
        if data is None:
            return None
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise DeserializationError(f"invalid JSON: {exc}", data) from exc


class BytesSerde:
    """Bytes as they are (``bytearray`` and ``memoryview`` are copied to ``bytes``)."""

    def serialize(self, value: Any) -> bytes | None:
        if value is None:
            return None
        if isinstance(value, bytes | bytearray | memoryview):
            return bytes(value)
        raise SerializationError(f"expected bytes, got {type(value).__name__}", value)

    def deserialize(self, data: bytes | None) -> bytes | None:
        return data


class StrSerde:
    """Text in an encoding (UTF-8 by default); bytes are taken as already encoded."""

    def __init__(self, encoding: str = "utf-8") -> None:
        self.encoding = encoding

    def serialize(self, value: Any) -> bytes | None:
        if value is None or isinstance(value, bytes):
            return value
        if not isinstance(value, str):
            raise SerializationError(f"expected str, got {type(value).__name__}", value)
        try:
            return value.encode(self.encoding)
        except UnicodeEncodeError as exc:
            raise SerializationError(f"cannot encode as {self.encoding}: {exc}", value) from exc

    def deserialize(self, data: bytes | None) -> str | None:
        if data is None:
            return None
        try:
            return data.decode(self.encoding)
        except UnicodeDecodeError as exc:
            raise DeserializationError(f"not valid {self.encoding}: {exc}", data) from exc


def resolve(serde: Serde | SerdeName) -> Serde:
    """A serde object for a built-in name, or ``serde`` itself when it is one already."""
    if isinstance(serde, str):
        builtins: dict[str, Serde] = {"json": JsonSerde(), "bytes": BytesSerde(), "str": StrSerde()}
        try:
            return builtins[serde]
        except KeyError:
            raise ValueError(f"unknown serde {serde!r}; expected one of {sorted(builtins)}") from None
    if not isinstance(serde, Serde):
        raise TypeError(f"{serde!r} has no serialize/deserialize methods")
    return serde
