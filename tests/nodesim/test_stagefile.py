"""Stage files (`pykubelet simulate --stage-file`): parsing, the errors that name the field, which stage
a pod gets, and what the stage makes of the pod's life through the same rules as the annotations."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from nodesim import stages
from nodesim.settings import SimSettings
from nodesim.stagefile import StageFileError, load_stages, parse_stages, staged

SETTINGS = SimSettings(start_delay=1.0, job_duration=2.0)

FILE = """
apiVersion: nodesim.pykubelet.io/v1alpha1
kind: Stage
metadata: {name: batch-fails}
spec:
  selector:
    matchLabels: {app: batch}
  namespaces: [jobs]
  startDelay: 3s
  runFor: 10s
  exitCode: 2
---
apiVersion: nodesim.pykubelet.io/v1alpha1
kind: Stage
metadata: {name: quick-success}
spec:
  selector:
    matchExpressions:
    - {key: tier, operator: In, values: [etl, report]}
  startDelay: 250ms
  phase: Succeeded
---
apiVersion: nodesim.pykubelet.io/v1alpha1
kind: Stage
metadata: {name: stubborn}
spec:
  ignoreSigterm: true
"""


def pod(
    namespace: str = "default", labels: dict[str, str] | None = None, **annotations: str
) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": namespace, "labels": labels or {}, "annotations": annotations},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]},
    }


def test_the_first_matching_stage_sets_delays_and_the_exit() -> None:
    found = parse_stages(FILE)
    assert [s.name for s in found] == ["batch-fails", "quick-success", "stubborn"]
    batch = staged(pod("jobs", {"app": "batch"}), found)
    assert stages.start_delay(batch, SETTINGS) == 3.0
    assert stages.run_for(batch, SETTINGS) == 10.0
    assert stages.exit_code(batch) == 2
    assert stages.termination_wait(batch) == 0.0
    # the same labels in another namespace: not that stage; the catch-all applies
    other = staged(pod("default", {"app": "batch"}), found)
    assert stages.start_delay(other, SETTINGS) == 1.0
    assert stages.run_for(other, SETTINGS) is None
    assert stages.termination_wait({**other, "spec": {"terminationGracePeriodSeconds": 7}}) == 7.0


def test_a_phase_is_the_exit_code_that_leads_to_it_at_once() -> None:
    etl = staged(pod(labels={"tier": "etl"}), parse_stages(FILE))
    assert stages.start_delay(etl, SETTINGS) == 0.25
    assert stages.run_for(etl, SETTINGS) == 0.0
    assert stages.exit_code(etl) == 0
    assert not stages.restarts_after_exit(etl, stages.exit_code(etl))  # Never: it ends Succeeded
    failed = parse_stages(FILE.split("---")[1].replace("Succeeded", "Failed"))
    assert stages.exit_code(staged(pod(labels={"tier": "report"}), failed)) == 1


def test_the_pods_own_annotations_win_and_the_informers_object_is_left_alone() -> None:
    original = pod("jobs", {"app": "batch"}, **{stages.EXIT_CODE: "0"})
    seen = staged(original, parse_stages(FILE))
    assert stages.exit_code(seen) == 0 and stages.run_for(seen, SETTINGS) == 10.0
    assert original["metadata"]["annotations"] == {stages.EXIT_CODE: "0"}
    unmatched = pod(labels={"app": "web"})
    assert staged(unmatched, parse_stages(FILE.split("---")[0])) is unmatched


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("3s", "soon"), "stage 'batch-fails': spec.startDelay: invalid duration 'soon'"),
        (("exitCode: 2", "exitCode: 300"), "spec.exitCode: must be an integer from 0 to 255"),
        (("operator: In", "operator: Near"), "stage 'quick-success': spec.selector:"),
        (("phase: Succeeded", "phase: Done"), "spec.phase: Unsupported value: 'Done'"),
        (("ignoreSigterm: true", "ignoreSigterm: yes please"), "spec.ignoreSigterm: must be true or false"),
        (("runFor: 10s", "runFour: 10s"), "stage 'batch-fails': spec.runFour: unknown field"),
        (("name: stubborn", "name: batch-fails"), "metadata.name: Duplicate value"),
        (
            ("kind: Stage\nmetadata: {name: stubborn}", "kind: Stages\nmetadata: {name: stubborn}"),
            "document 3",
        ),
    ],
)
def test_a_bad_file_is_refused_naming_the_field(change: tuple[str, str], message: str) -> None:
    with pytest.raises(StageFileError, match=re.escape(message)):
        parse_stages(FILE.replace(*change))


def test_a_file_is_read_and_its_absence_reported(tmp_path: Path) -> None:
    path = tmp_path / "stages.yaml"
    path.write_text(FILE)
    assert len(load_stages(path)) == 3
    with pytest.raises(StageFileError, match="No such file"):
        load_stages(tmp_path / "missing.yaml")
