"""decode_json parses a JSON body once for its value and its duplicate fields: the same value, the same
duplicates and the same 400s as decoding it and looking for duplicates apart."""

from __future__ import annotations

import pytest

from controlplane.apiserver import decoding
from controlplane.apiserver.errors import ApiError

BODIES = [
    b'{"metadata":{"name":"a"},"spec":{"replicas":1}}',
    b'{"spec":{"replicas":1,"replicas":2},"metadata":{"name":"a","name":"b"}}',
    b'{"spec":{"containers":[{"name":"c","image":"i","image":"j"}]}}',
    b'{"data":{"k":"\\ud800x"},"data":{"k":"v"}}',
    b'[{"a":1},{"a":1,"a":2}]',
    b'{"n":1.5e3,"m":[1,2,{"x":null}]}',
]
REFUSED = [b"", b"  ", b'{"a":NaN}', b'{"a":1e999}', b'{"a":', b'{"a":1,"a":2,']


@pytest.mark.parametrize("body", BODIES)
def test_value_and_duplicates_as_two_passes_give_them(body: bytes) -> None:
    assert decoding.decode_json(body) == (
        decoding.decode(body, "application/json"),
        decoding.duplicate_fields(body),
    )


@pytest.mark.parametrize("body", REFUSED)
def test_refusals_as_decode_words_them(body: bytes) -> None:
    with pytest.raises(ApiError) as expected:
        decoding.decode(body, "application/json")
    with pytest.raises(ApiError) as got:
        decoding.decode_json(body)
    assert got.value.status() == expected.value.status()
