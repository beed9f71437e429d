"""Upstream's own serialization fixtures against our protobuf codec: for every group/version/kind in
`shared/k8s-api-testdata/v1.33.0/` (the same fully populated object as .json and .pb), the .pb decodes
to the .json object, and encoding the .json object gives the .pb bytes exactly.

The fixtures are of release 1.33; the table holds their fields (the few added in 1.33, such as a
container's `stopSignal`, included), so every fixture round-trips byte for byte and no exception list
is needed. A 1.32 server still drops those fields: the JSON decoder after the codec knows only 1.32's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controlplane.apiserver.protobuf import codec

_REPO = Path(__file__).resolve().parents[2]
# shared/ lies beside the clone (CI, the main work tree) or beside a worktree's parent folder.
FIXTURES = next(
    (
        d / "shared" / "k8s-api-testdata" / "v1.33.0"
        for d in (_REPO.parent, _REPO.parent.parent)
        if (d / "shared" / "k8s-api-testdata" / "v1.33.0").is_dir()
    ),
    _REPO.parent / "shared" / "k8s-api-testdata" / "v1.33.0",
)
# The `.after_roundtrip` files are what a fixture becomes after a round trip through an older release;
# the test pairs each kind's own .json and .pb.
STEMS = sorted(p.name[:-3] for p in FIXTURES.glob("*.pb") if "after_roundtrip" not in p.name)


def _decode(data: bytes) -> tuple[dict, str]:
    api_version, kind, raw = codec.split_envelope(data)
    if not kind:  # the WatchEvent fixture's envelope names no kind
        return codec.decode_message(raw, "WatchEvent"), "WatchEvent"
    return codec.decode_envelope(data)


def test_the_corpus_is_there() -> None:
    assert len(STEMS) >= 178, f"{FIXTURES} holds {len(STEMS)} fixtures"


@pytest.mark.parametrize("stem", STEMS)
def test_pb_and_json_decode_to_the_same_object(stem: str) -> None:
    obj, _ = _decode((FIXTURES / f"{stem}.pb").read_bytes())
    assert obj == json.loads((FIXTURES / f"{stem}.json").read_text())


@pytest.mark.parametrize("stem", STEMS)
def test_encoding_the_json_object_gives_the_fixture_bytes(stem: str) -> None:
    data = (FIXTURES / f"{stem}.pb").read_bytes()
    api_version, kind, _ = codec.split_envelope(data)
    _, message = _decode(data)
    obj = json.loads((FIXTURES / f"{stem}.json").read_text())
    assert codec.encode_envelope(api_version, kind, codec.encode_message(obj, message)) == data


def test_every_served_builtin_kind_has_a_message() -> None:
    """Every kind the server serves has its protobuf form: the fixtures' kinds, and the two outside
    k8s.io/api (the aggregator's APIService and apiextensions' CustomResourceDefinition, which the
    fixtures lack) from upstream's generated.proto."""
    import controlplane.apiserver.server  # noqa: F401  (the kind table in its import order)
    from controlplane.apiserver.kinds import KINDS

    missing = {(k.api_version, k.kind) for k in KINDS if codec.message_for(k.api_version, k.kind) is None}
    assert missing == set()
    for k in KINDS:
        if codec.message_for(k.api_version, k.kind):
            assert codec.message_for(k.api_version, k.kind + "List"), k.kind
