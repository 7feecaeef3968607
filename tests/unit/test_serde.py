"""Serializers: round trips, None passes through, clear errors that keep the data."""

from __future__ import annotations

from typing import Any

import pytest

from laneway.kafka.serde import (
    BytesSerde,
    DeserializationError,
    JsonSerde,
    SerdeError,
    SerializationError,
    StrSerde,
    resolve,
)


@pytest.mark.parametrize(
    "value", [{"a": 1, "b": [1, 2.5, None, "x"]}, [], "text", 0, True, {"nested": {"ü": "é"}}]
)
def test_json_round_trip(value: Any) -> None:
    serde = JsonSerde()
    data = serde.serialize(value)
    assert isinstance(data, bytes)
    assert serde.deserialize(data) == value


def test_json_sort_keys_gives_stable_bytes() -> None:
    assert JsonSerde(sort_keys=True).serialize({"b": 1, "a": 2}) == b'{"a":2,"b":1}'


def test_none_passes_through_every_serde() -> None:
    for serde in (JsonSerde(), BytesSerde(), StrSerde()):
        assert serde.serialize(None) is None
        assert serde.deserialize(None) is None


def test_json_errors_keep_cause_and_data() -> None:
    with pytest.raises(SerializationError) as err:
        JsonSerde().serialize({"x": object()})
    assert err.value.__cause__ is not None
    with pytest.raises(DeserializationError) as derr:
        JsonSerde().deserialize(b"{not json")
    assert derr.value.data == b"{not json"
    assert isinstance(derr.value, SerdeError) and isinstance(derr.value, ValueError)


def test_bytes_and_str() -> None:
    assert BytesSerde().serialize(bytearray(b"ab")) == b"ab"
    with pytest.raises(SerializationError):
        BytesSerde().serialize("text")
    assert StrSerde().serialize("é") == "é".encode()
    assert StrSerde().serialize(b"raw") == b"raw"  # a key read from Kafka goes back as it is
    assert StrSerde("latin-1").deserialize(b"\xe9") == "é"
    with pytest.raises(SerializationError):
        StrSerde().serialize(12)
    with pytest.raises(DeserializationError):
        StrSerde().deserialize(b"\xff\xfe\xfd")


def test_resolve() -> None:
    assert isinstance(resolve("json"), JsonSerde)
    assert isinstance(resolve("bytes"), BytesSerde)
    assert isinstance(resolve("str"), StrSerde)
    custom = StrSerde("ascii")
    assert resolve(custom) is custom
    with pytest.raises(ValueError, match="unknown serde"):
        resolve("yaml")  # type: ignore[arg-type]

    class Upper:
        def serialize(self, value: Any) -> bytes | None:
            return None if value is None else str(value).upper().encode()

        def deserialize(self, data: bytes | None) -> Any:
            return data

    assert resolve(Upper()).serialize("a") == b"A"
    with pytest.raises(TypeError):
        resolve(object())  # type: ignore[arg-type]
