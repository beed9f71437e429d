"""The Job spec, shared by Jobs and by CronJobs' jobTemplate: upstream's validateJobSpec (the counts,
the completion mode, the pod template whose pods never restart Always) and the generated selector of a
Job (pkg/registry/batch/job/strategy.go generateSelector, validation.ValidateGeneratedSelector).

A Job asks for a selector only when `manualSelector` is true; otherwise the API server writes one that
selects the Job's UID, and labels the template with it and the Job's name, both in the
`batch.kubernetes.io/` form and the legacy one.
"""

from __future__ import annotations

from typing import Any

from controlplane.apiserver.errors import FieldError, invalid, not_supported, required
from controlplane.apiserver.kinds import podspec
from controlplane.apiserver.validation import labels, nonnegative, qualified_name
from kubeclient.selectors import SelectorError, from_label_selector

Obj = dict[str, Any]

CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
JOB_NAME = "batch.kubernetes.io/job-name"
LEGACY_CONTROLLER_UID = "controller-uid"
LEGACY_JOB_NAME = "job-name"
NON_INDEXED, INDEXED = "NonIndexed", "Indexed"
MAX_PARALLELISM_INDEXED = 100_000
_RESTART = ["OnFailure", "Never"]
_REPLACEMENT = ["Failed", "TerminatingOrFailed"]

TYPE_MARKS: dict[tuple[str, str], str] = dict(podspec.TYPE_MARKS)


def validate_job_spec(spec: Any, path: str) -> list[FieldError]:
    """validateJobSpec: everything but the selector."""
    if not isinstance(spec, dict):
        return [required(path)]
    errors: list[FieldError] = []
    for name in (
        "parallelism",
        "completions",
        "activeDeadlineSeconds",
        "backoffLimit",
        "ttlSecondsAfterFinished",
        "backoffLimitPerIndex",
        "maxFailedIndexes",
    ):
        errors += nonnegative(f"{path}.{name}", spec.get(name))
    mode = spec.get("completionMode")
    errors += _per_index(spec, path, mode)
    if mode is not None and mode not in (NON_INDEXED, INDEXED):
        errors.append(not_supported(f"{path}.completionMode", mode, [NON_INDEXED, INDEXED]))
    if mode == INDEXED:
        if spec.get("completions") is None:
            errors.append(required(f"{path}.completions", f"when completion mode is {INDEXED}"))
        parallelism = spec.get("parallelism")
        if isinstance(parallelism, int) and parallelism > MAX_PARALLELISM_INDEXED:
            errors.append(
                invalid(
                    f"{path}.parallelism",
                    parallelism,
                    f"must be less than or equal to {MAX_PARALLELISM_INDEXED} when completion mode is {INDEXED}",
                )
            )
    replacement = spec.get("podReplacementPolicy")
    policy = spec.get("podFailurePolicy")
    if policy is None and replacement is not None and replacement not in _REPLACEMENT:
        errors.append(not_supported(f"{path}.podReplacementPolicy", replacement, _REPLACEMENT))
    if policy is not None:
        errors += validate_pod_failure_policy(policy, f"{path}.podFailurePolicy", spec)
    success = spec.get("successPolicy")
    if isinstance(success, dict):
        if mode != INDEXED:
            errors.append(invalid(f"{path}.successPolicy", success, "requires indexed completion mode"))
        else:
            errors += validate_success_policy(success, f"{path}.successPolicy", spec.get("completions"))
    if policy is not None and replacement not in (None, "Failed"):
        errors.append(not_supported(f"{path}.podReplacementPolicy", replacement, ["Failed"]))
    template = spec.get("template")
    if not isinstance(template, dict):
        return [*errors, required(f"{path}.template")]
    errors += labels(f"{path}.template.metadata.labels", (template.get("metadata") or {}).get("labels"))
    pod_spec = template.get("spec")
    errors += podspec.validate_pod_spec(pod_spec, f"{path}.template.spec")
    restart = (pod_spec or {}).get("restartPolicy") if isinstance(pod_spec, dict) else None
    at = f"{path}.template.spec.restartPolicy"
    if restart in (None, "", "Always"):
        # Defaulted to Always when left out: upstream asks for one of the two.
        errors.append(required(at, 'valid values: "OnFailure", "Never"'))
    elif restart not in _RESTART:
        errors.append(not_supported(at, restart, _RESTART))
    elif spec.get("podFailurePolicy") is not None and restart != "Never":
        errors.append(invalid(at, restart, 'only "Never" is supported when podFailurePolicy is specified'))
    return errors


_ACTIONS = ["Count", "FailIndex", "FailJob", "Ignore"]
_OPERATORS = ["In", "NotIn"]
MAX_RULES = 20
MAX_VALUES = 255
MAX_PATTERNS = 20


def _go_list(values: list[str]) -> str:
    """Go's %q of a []string: ["a" "b"]."""
    return "[" + " ".join(f'"{v}"' for v in values) + "]"


def _container_names(spec: Obj) -> set[str]:
    pod_spec = (spec.get("template") or {}).get("spec") or {}
    return {
        c.get("name", "")
        for group in ("containers", "initContainers")
        for c in pod_spec.get(group) or []
        if isinstance(c, dict)
    }


def validate_pod_failure_policy(policy: Any, path: str, spec: Obj) -> list[FieldError]:
    """validatePodFailurePolicy: at most 20 rules, each with a known action and exactly one of onExitCodes
    and onPodConditions."""
    if not isinstance(policy, dict):
        return []
    rules = policy.get("rules") or []
    errors: list[FieldError] = []
    if len(rules) > MAX_RULES:
        errors.append(
            FieldError(
                "FieldValueTooMany",
                f"{path}.rules",
                f"Too many: {len(rules)}: must have at most {MAX_RULES} items",
            )
        )
    names = _container_names(spec)
    for i, rule in enumerate(rules):
        at = f"{path}.rules[{i}]"
        if not isinstance(rule, dict):
            errors.append(required(at))
            continue
        action = rule.get("action")
        if not action:
            errors.append(required(f"{at}.action", f"valid values: {_go_list(_ACTIONS)}"))
        elif action == "FailIndex":
            if spec.get("backoffLimitPerIndex") is None:
                errors.append(invalid(f"{at}.action", action, "requires the backoffLimitPerIndex to be set"))
        elif action not in _ACTIONS:
            errors.append(not_supported(f"{at}.action", action, _ACTIONS))
        codes, conditions = rule.get("onExitCodes"), rule.get("onPodConditions") or []
        if isinstance(codes, dict):
            errors += _validate_exit_codes(codes, f"{at}.onExitCodes", names)
        if isinstance(conditions, list):
            errors += _validate_conditions(conditions, f"{at}.onPodConditions")
        if codes is not None and conditions:
            errors.append(_omitted(at, "specifying both OnExitCodes and OnPodConditions is not supported"))
        elif codes is None and not conditions:
            errors.append(_omitted(at, "specifying one of OnExitCodes and OnPodConditions is required"))
    return errors


def _validate_conditions(patterns: list[Any], path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    if len(patterns) > MAX_PATTERNS:
        errors.append(
            FieldError(
                "FieldValueTooMany",
                path,
                f"Too many: {len(patterns)}: must have at most {MAX_PATTERNS} items",
            )
        )
    statuses = ["False", "True", "Unknown"]
    for j, pattern in enumerate(patterns):
        if not isinstance(pattern, dict):
            errors.append(required(f"{path}[{j}]"))
            continue
        errors += qualified_name(f"{path}[{j}].type", pattern.get("type") or "")
        status = pattern.get("status")
        if not status:
            errors.append(required(f"{path}[{j}].status", f"valid values: {_go_list(statuses)}"))
        elif status not in statuses:
            errors.append(not_supported(f"{path}[{j}].status", status, statuses))
    return errors


def _omitted(path: str, detail: str) -> FieldError:
    """field.Invalid with OmitValueType: the message names no value."""
    return FieldError("FieldValueInvalid", path, f"Invalid value: {detail}")


def _validate_exit_codes(codes: Obj, path: str, names: set[str]) -> list[FieldError]:
    """validatePodFailurePolicyRuleOnExitCodes."""
    errors: list[FieldError] = []
    operator = codes.get("operator")
    if not operator:
        errors.append(required(f"{path}.operator", f"valid values: {_go_list(_OPERATORS)}"))
    elif operator not in _OPERATORS:
        errors.append(not_supported(f"{path}.operator", operator, _OPERATORS))
    container = codes.get("containerName")
    if container is not None and container not in names:
        errors.append(
            invalid(
                f"{path}.containerName",
                container,
                "must be one of the container or initContainer names in the pod template",
            )
        )
    values = [v for v in codes.get("values") or [] if isinstance(v, int)]
    if not values:
        errors.append(invalid(f"{path}.values", values, "at least one value is required"))
    elif len(values) > MAX_VALUES:
        errors.append(
            FieldError(
                "FieldValueTooMany",
                f"{path}.values",
                f"Too many: {len(values)}: must have at most {MAX_VALUES} items",
            )
        )
    seen: set[int] = set()
    ordered = True
    for k, value in enumerate(values):
        if operator == "In" and value == 0:
            errors.append(invalid(f"{path}.values[{k}]", value, "must not be 0 for the In operator"))
        if value in seen:
            errors.append(
                FieldError("FieldValueDuplicate", f"{path}.values[{k}]", f"Duplicate value: {value}")
            )
        seen.add(value)
        if k > 0 and values[k - 1] > value:
            ordered = False
    if not ordered:
        errors.append(invalid(f"{path}.values", values, "must be ordered"))
    return errors


MAX_SUCCESS_RULES = 20
MAX_SUCCEEDED_INDEXES = 64 * 1024


def indexes_total(text: str, completions: int) -> int:
    """validateIndexesFormat: how many indexes `1,3-5` names; ValueError with upstream's reason."""
    if not text:
        return 0
    last: int | None = None
    total = 0
    for interval in text.split(","):
        limits = interval.split("-")
        if len(limits) > 2:
            raise ValueError(
                f"the fragment {json_quote(interval)} violates the requirement that an index interval "
                "can have at most two parts separated by '-'"
            )
        numbers = []
        for limit in limits:
            if not limit.isdigit():
                raise ValueError(f"cannot convert string to integer for index: {json_quote(limit)}")
            if int(limit) >= completions:
                raise ValueError(f"too large index: {json_quote(limit)}")
            if last is not None and last >= int(limit):
                raise ValueError(f"non-increasing order, previous: {last}, current: {int(limit)}")
            last = int(limit)
            numbers.append(last)
        total += 1 if len(numbers) == 1 else numbers[1] - numbers[0] + 1
    return total


def json_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def validate_success_policy(policy: Obj, path: str, completions: Any) -> list[FieldError]:
    """validateSuccessPolicy (Indexed Jobs only)."""
    rules = policy.get("rules") or []
    errors: list[FieldError] = []
    if not rules:
        errors.append(
            required(
                f"{path}.rules", "at least one rules must be specified when the successPolicy is specified"
            )
        )
    if len(rules) > MAX_SUCCESS_RULES:
        errors.append(
            FieldError(
                "FieldValueTooMany",
                f"{path}.rules",
                f"Too many: {len(rules)}: must have at most {MAX_SUCCESS_RULES} items",
            )
        )
    limit = int(completions) if isinstance(completions, int) else 0
    for i, rule in enumerate(rules):
        at = f"{path}.rules[{i}]"
        if not isinstance(rule, dict):
            errors.append(required(at))
            continue
        indexes, count = rule.get("succeededIndexes"), rule.get("succeededCount")
        if indexes is None and count is None:
            errors.append(
                required(at, "at least one of succeededCount or succeededIndexes must be specified")
            )
        total = 0
        if isinstance(indexes, str):
            if len(indexes) > MAX_SUCCEEDED_INDEXES:
                errors.append(
                    FieldError(
                        "FieldValueTooLong",
                        f"{at}.succeededIndexes",
                        f"Too long: may not be more than {MAX_SUCCEEDED_INDEXES} bytes",
                    )
                )
            try:
                total = indexes_total(indexes, limit)
            except ValueError as err:
                errors.append(
                    invalid(f"{at}.succeededIndexes", indexes, f"error parsing succeededIndexes: {err}")
                )
        if isinstance(count, int):
            errors += nonnegative(f"{at}.succeededCount", count)
            if count > limit:
                errors.append(
                    invalid(
                        f"{at}.succeededCount",
                        count,
                        f"must be less than or equal to {limit} (the number of specified completions)",
                    )
                )
            if indexes is not None and count > total:
                errors.append(
                    invalid(
                        f"{at}.succeededCount",
                        count,
                        f"must be less than or equal to {total} (the "
                        "number of indexes in the specified succeededIndexes field)",
                    )
                )
    return errors


def _per_index(spec: Obj, path: str, mode: Any) -> list[FieldError]:
    """backoffLimitPerIndex and maxFailedIndexes: Indexed Jobs only, the second needing the first."""
    per_index, max_failed = spec.get("backoffLimitPerIndex"), spec.get("maxFailedIndexes")
    errors: list[FieldError] = []
    if max_failed is not None and per_index is None:
        errors.append(required(f"{path}.backoffLimitPerIndex", "when maxFailedIndexes is specified"))
    if mode == INDEXED:
        completions = spec.get("completions")
        if isinstance(max_failed, int) and isinstance(completions, int) and max_failed > completions:
            errors.append(
                invalid(f"{path}.maxFailedIndexes", max_failed, "must be less than or equal to completions")
            )
    else:
        for name, value in (("backoffLimitPerIndex", per_index), ("maxFailedIndexes", max_failed)):
            if value is not None:
                errors.append(invalid(f"{path}.{name}", value, "requires indexed completion mode"))
    return errors


def validate_selector(spec: Obj, path: str) -> list[FieldError]:
    """ValidateJobSpec's selector part: present, valid, matching the template's labels."""
    selector = spec.get("selector")
    if not selector:
        return [required(f"{path}.selector")]
    template_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels")
    try:
        matches = from_label_selector(selector).matches(template_labels or {})
    except SelectorError as err:
        return [invalid(f"{path}.selector", selector, str(err))]
    if not matches:
        return [
            invalid(
                f"{path}.template.metadata.labels",
                template_labels,
                "`selector` does not match template `labels`",
            )
        ]
    return []


def generate_selector(job: Obj) -> None:
    """generateSelector: the template's name and UID labels (unless set) and the UID selector."""
    meta = job["metadata"]
    spec = job.setdefault("spec", {})
    if not isinstance(spec.get("template"), dict):
        return
    tmeta = spec["template"].setdefault("metadata", {})
    template_labels = tmeta.get("labels")
    if not isinstance(template_labels, dict):
        template_labels = tmeta["labels"] = {}
    for key in (LEGACY_JOB_NAME, JOB_NAME):
        template_labels.setdefault(key, meta.get("name", ""))
    for key in (LEGACY_CONTROLLER_UID, CONTROLLER_UID):
        template_labels.setdefault(key, meta.get("uid", ""))
    selector = spec.get("selector")
    if not isinstance(selector, dict):
        selector = spec["selector"] = {}
    match = selector.get("matchLabels")
    if not isinstance(match, dict):
        match = selector["matchLabels"] = {}
    match.setdefault(CONTROLLER_UID, meta.get("uid", ""))


def _has_label(template_labels: Obj, path: str, key: str, expected: str) -> list[FieldError]:
    """ValidateHasLabel."""
    if key not in template_labels:
        return [required(f"{path}.labels[{key}]", f"must be '{expected}'")]
    if template_labels[key] != expected:
        return [invalid(f"{path}.labels[{key}]", template_labels, f"must be '{expected}'")]
    return []


def validate_generated_selector(job: Obj) -> list[FieldError]:
    """ValidateGeneratedSelector: the labels and the selector generate_selector writes are intact."""
    meta, spec = job.get("metadata") or {}, job.get("spec") or {}
    if spec.get("manualSelector") is True or spec.get("selector") is None:
        return []
    template_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels")
    if template_labels is None:
        return []
    uid, name = meta.get("uid", ""), meta.get("name", "")
    path = "spec.template.metadata"
    errors = [required("metadata.uid")] if not uid else []
    errors += _has_label(template_labels, path, LEGACY_CONTROLLER_UID, uid)
    errors += _has_label(template_labels, path, LEGACY_JOB_NAME, name)
    errors += _has_label(template_labels, path, CONTROLLER_UID, uid)
    errors += _has_label(template_labels, path, JOB_NAME, name)
    if spec["selector"] != {"matchLabels": {CONTROLLER_UID: uid}}:
        errors.append(invalid("spec.selector", spec["selector"], "`selector` not auto-generated"))
    return errors


def validate_template_of_cronjob(spec: Any, path: str) -> list[FieldError]:
    """ValidateJobTemplateSpec: a CronJob's jobs always get a generated selector."""
    errors = validate_job_spec(spec, path)
    if isinstance(spec, dict):
        if spec.get("selector") is not None:
            errors.append(invalid(f"{path}.selector", spec["selector"], "`selector` will be auto-generated"))
        if spec.get("manualSelector") is True:
            errors.append(not_supported(f"{path}.manualSelector", True, ["nil", "false"]))
    return errors
