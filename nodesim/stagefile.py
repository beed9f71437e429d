"""Stage files (kwok's Stage objects, kept small): per pod selector, how its pods move.

`pykubelet simulate --stage-file F` reads one or more YAML documents (or a list) of

    apiVersion: nodesim.pykubelet.io/v1alpha1
    kind: Stage
    metadata: {name: batch-fails}
    spec:
      selector:                      # a LabelSelector over the pod's labels; {} or absent: every pod
        matchLabels: {app: batch}
      namespaces: [jobs]             # optional: only pods in these namespaces
      startDelay: 3s                 # Pending -> Running after this long
      runFor: 10s                    # its containers exit after running this long
      exitCode: 1                    # ... with this code
      phase: Failed                  # or: the phase the exit leads to (Succeeded: code 0, Failed: 1;
                                     #   runFor 0s unless given); restartPolicy decides as the kubelet does
      ignoreSigterm: true            # on deletion it takes its whole grace period

The first stage whose selector matches a pod gives that pod's values; the pod's own annotations
(stages.py) win over the stage's, the stage's over the command line's defaults. A stage is applied by
filling in the annotations the pod lacks, so the rules in stages.py stay the only ones. A bad file stops
the start, naming the document and the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kubeclient.duration import parse_duration
from kubeclient.selectors import Selector, SelectorError, from_label_selector
from nodesim import stages

API_VERSION = "nodesim.pykubelet.io/v1alpha1"
PHASE_CODES = {"Succeeded": 0, "Failed": 1}


class StageFileError(ValueError):
    """The file cannot be used; the message names the document and the field."""


@dataclass(frozen=True)
class Stage:
    name: str
    selector: Selector
    namespaces: frozenset[str] = frozenset()
    annotations: Mapping[str, str] = field(default_factory=dict)  # the stages.py annotations it implies

    def matches(self, pod: Mapping[str, Any]) -> bool:
        meta = pod.get("metadata") or {}
        if self.namespaces and meta.get("namespace") not in self.namespaces:
            return False
        return self.selector.matches(meta.get("labels") or {})


def _duration(where: str, value: Any) -> str:
    try:
        seconds = parse_duration(str(value))
    except ValueError:
        raise StageFileError(f"{where}: invalid duration {value!r}") from None
    if seconds < 0:
        raise StageFileError(f"{where}: must not be negative")
    return str(value)


def parse_stage(doc: Any, where: str) -> Stage:
    """One Stage document; StageFileError naming the field."""
    if not isinstance(doc, Mapping):
        raise StageFileError(f"{where}: a Stage must be an object")
    if doc.get("kind") != "Stage" or doc.get("apiVersion") != API_VERSION:
        raise StageFileError(f"{where}: want apiVersion {API_VERSION} and kind Stage")
    name = str((doc.get("metadata") or {}).get("name") or "")
    if not name:
        raise StageFileError(f"{where}.metadata.name: Required value")
    where = f"stage {name!r}"
    spec = doc.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise StageFileError(f"{where}: spec must be an object")
    known = {"selector", "namespaces", "startDelay", "runFor", "exitCode", "phase", "ignoreSigterm"}
    unknown = sorted(set(spec) - known)
    if unknown:
        raise StageFileError(f"{where}: spec.{unknown[0]}: unknown field")
    try:
        selector = from_label_selector(spec.get("selector") or {})
    except SelectorError as err:
        raise StageFileError(f"{where}: spec.selector: {err}") from None
    namespaces = spec.get("namespaces") or []
    if not isinstance(namespaces, list):
        raise StageFileError(f"{where}: spec.namespaces must be a list")
    out: dict[str, str] = {}
    if "startDelay" in spec:
        out[stages.START_DELAY] = _duration(f"{where}: spec.startDelay", spec["startDelay"])
    if "runFor" in spec:
        out[stages.RUN_FOR] = _duration(f"{where}: spec.runFor", spec["runFor"])
    if "phase" in spec:
        if spec["phase"] not in PHASE_CODES:
            raise StageFileError(
                f"{where}: spec.phase: Unsupported value: {spec['phase']!r}: want Succeeded or Failed"
            )
        if "exitCode" in spec and (spec["exitCode"] == 0) != (spec["phase"] == "Succeeded"):
            raise StageFileError(f"{where}: spec.exitCode: contradicts spec.phase")
        out[stages.EXIT_CODE] = str(PHASE_CODES[spec["phase"]])
        out.setdefault(stages.RUN_FOR, "0s")
    if "exitCode" in spec:
        code = spec["exitCode"]
        if not isinstance(code, int) or isinstance(code, bool) or not 0 <= code <= 255:
            raise StageFileError(f"{where}: spec.exitCode: must be an integer from 0 to 255")
        out[stages.EXIT_CODE] = str(code)
    if "ignoreSigterm" in spec:
        if not isinstance(spec["ignoreSigterm"], bool):
            raise StageFileError(f"{where}: spec.ignoreSigterm: must be true or false")
        out[stages.IGNORE_SIGTERM] = "true" if spec["ignoreSigterm"] else "false"
    return Stage(name, selector, frozenset(str(n) for n in namespaces), out)


def parse_stages(text: str, source: str = "stage file") -> tuple[Stage, ...]:
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        raise StageFileError(f"{source}: not YAML: {err}") from None
    if len(docs) == 1 and isinstance(docs[0], list):
        docs = docs[0]
    found = tuple(parse_stage(doc, f"{source}: document {i + 1}") for i, doc in enumerate(docs))
    names = [s.name for s in found]
    for name in names:
        if names.count(name) > 1:
            raise StageFileError(f"{source}: stage {name!r}: metadata.name: Duplicate value")
    return found


def load_stages(path: Path) -> tuple[Stage, ...]:
    try:
        text = path.read_text()
    except OSError as err:
        raise StageFileError(f"{path}: {err.strerror}") from None
    return parse_stages(text, str(path))


def staged(pod: dict[str, Any], found: tuple[Stage, ...]) -> dict[str, Any]:
    """The pod as the rules see it: the first matching stage's annotations under its own (a copy when
    anything is added; the informer's object is never changed)."""
    for stage in found:
        if stage.matches(pod):
            meta = pod.get("metadata") or {}
            own = meta.get("annotations") or {}
            missing = {k: v for k, v in stage.annotations.items() if k not in own}
            if not missing:
                return pod
            return {**pod, "metadata": {**meta, "annotations": {**missing, **own}}}
    return pod
