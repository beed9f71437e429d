"""The protobuf codec on its own: upstream's field numbers where the fixtures cannot tell fields apart,
how JSON values map to the wire (zero values, times, int-or-string, maps, raw extensions), what is
dropped, and that no byte string makes the decoder fail other than with a decode error (fuzzed)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controlplane.apiserver.protobuf import codec, wire

SETTINGS = settings(deadline=None, database=None, suppress_health_check=list(HealthCheck), max_examples=300)


def _fields(data: bytes) -> dict[int, list]:
    out: dict[int, list] = {}
    for number, _, value in wire.fields(data):
        out.setdefault(number, []).append(value)
    return out


def test_pod_spec_bools_and_lists_carry_upstreams_numbers() -> None:
    """Every bool of a fixture is true, so these come from upstream's generated.proto, not the pairing."""
    spec = {
        "containers": [{"name": "c"}],
        "initContainers": [{"name": "i"}],
        "hostNetwork": True,
        "automountServiceAccountToken": False,
        "enableServiceLinks": True,
        "hostUsers": False,
    }
    fields = _fields(codec.encode_message(spec, "PodSpec"))
    assert _fields(fields[2][0])[1] == [b"c"]  # containers = 2
    assert _fields(fields[20][0])[1] == [b"i"]  # initContainers = 20
    assert fields[11] == [1] and fields[21] == [0] and fields[30] == [1] and fields[37] == [0]
    status = _fields(
        codec.encode_message({"containerStatuses": [{"name": "c"}], "podIPs": [{"ip": "a"}]}, "PodStatus")
    )
    assert 8 in status and 12 in status


def test_zero_values_of_pointer_fields_survive_and_empty_strings_do_not() -> None:
    raw = codec.encode_message({"replicas": 0, "paused": False, "minReadySeconds": 0}, "DeploymentSpec")
    # replicas is a pointer (0 means scaled to zero); paused and minReadySeconds are omitempty values
    assert codec.decode_message(raw, "DeploymentSpec") == {"replicas": 0}
    port = codec.encode_message({"containerPort": 80, "hostPort": 0}, "Ports")
    assert codec.decode_message(port, "Ports") == {"containerPort": 80}
    meta = wire.record(1, b"n") + wire.record(2, b"") + wire.record(3, b"")  # Go writes unset strings as ""
    assert codec.decode_message(meta, "ObjectMeta") == {"name": "n"}


def test_times_quantities_int_or_string_and_maps() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "creationTimestamp": "2024-05-06T07:08:09Z",
            "labels": {"b": "2", "a": "1"},
        },
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "resources": {"limits": {"cpu": "500m", "memory": "1Gi"}},
                    "livenessProbe": {"httpGet": {"port": "http", "path": "/"}},
                    "readinessProbe": {"tcpSocket": {"port": 8080}},
                }
            ]
        },
    }
    data = codec.encode_object(pod)
    assert data.startswith(b"k8s\x00")
    obj, _ = codec.decode_envelope(data)
    assert obj == pod
    labels = _fields(_fields(_fields(data[4:])[2][0])[1][0])[11]
    assert [_fields(e)[1][0] for e in labels] == [b"a", b"b"]  # map entries sorted by key
    zero = codec.decode_message(wire.record(8, b"\x08\x00\x10\x00") + wire.record(1, b"n"), "ObjectMeta")
    assert zero == {"name": "n"}  # a zero metav1.Time is unset


def test_raw_extension_holds_json_or_an_enveloped_object() -> None:
    inner = codec.encode_object({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})
    event = wire.record(1, b"ADDED") + wire.record(2, wire.record(1, inner))
    assert codec.decode_message(event, "WatchEvent") == {
        "type": "ADDED",
        "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}},
    }
    as_json = wire.record(1, b"ADDED") + wire.record(2, wire.record(1, b'{"a":[1]}'))
    assert codec.decode_message(as_json, "WatchEvent")["object"] == {"a": [1]}


def test_unknown_fields_are_dropped() -> None:
    data = wire.record(1, b"n") + wire.record(999, b"future") + wire.key(998, wire.VARINT) + b"\x05"
    assert codec.decode_message(data, "ObjectMeta") == {"name": "n"}


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (b"", "empty data"),
        (b"{}", "provided data does not appear to be a protobuf message"),
        (b"k8s\x00\x0a\x05\x0a", "unexpected EOF"),  # a length that lies
        (b"k8s\x00\x0f", "illegal wireType 7"),
    ],
)
def test_broken_envelopes_are_decode_errors(data: bytes, text: str) -> None:
    with pytest.raises((codec.CodecError, wire.WireError), match=text):
        codec.split_envelope(data)


def test_a_raw_extension_nesting_bomb_stops_at_the_depth_limit() -> None:
    data = codec.encode_object({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})
    for _ in range(codec.MAX_DEPTH + 5):  # WatchEvent in WatchEvent in ...
        data = codec.encode_envelope(
            "v1", "WatchEvent", wire.record(1, b"A") + wire.record(2, wire.record(1, data))
        )
    with pytest.raises(codec.CodecError, match="max depth"):
        codec.decode_envelope(data)


MESSAGES = sorted(codec.MESSAGES)


@SETTINGS
@given(st.sampled_from(MESSAGES), st.binary(max_size=200))
def test_fuzz_no_bytes_break_the_decoder(message: str, data: bytes) -> None:
    """Random bytes: a decoded object or a decode error, and what decodes encodes and decodes again to
    the same object (nothing the decoder returns is something the encoder cannot write)."""
    try:
        obj = codec.decode_message(data, message)
    except (codec.CodecError, wire.WireError):
        return
    json.dumps(obj)
    again = codec.decode_message(codec.encode_message(obj, message), message)
    assert again == obj


@SETTINGS
@given(st.sampled_from(MESSAGES), st.lists(st.tuples(st.integers(1, 40), st.binary(max_size=30)), max_size=8))
def test_fuzz_well_formed_records_with_any_payload(message: str, records: list[tuple[int, bytes]]) -> None:
    """Well-framed fields whose payloads are anything: the payload's own parsing must fail cleanly."""
    data = b"".join(wire.record(n, payload) for n, payload in records)
    try:
        codec.decode_message(data, message)
    except (codec.CodecError, wire.WireError):
        pass
