"""The HPA loop, as upstream's HorizontalController.reconcileAutoscaler (horizontal.go): every
--horizontal-pod-autoscaler-sync-period (15 s) each HPA reads its target's /scale, computes a
recommendation per metric (the highest wins), stabilizes and rate-limits it (behavior.py), writes the
new spec.replicas through /scale when it changed (SuccessfulRescale), and writes its status
(currentReplicas, desiredReplicas, currentMetrics, lastScaleTime, the three conditions)."""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from controlplane.controllers.base import Controller, ControllerContext
from controlplane.controllers.podautoscaler import custommetrics
from controlplane.controllers.podautoscaler import metrics as metricsclient
from controlplane.controllers.podautoscaler import replicas as calc
from controlplane.controllers.podautoscaler.behavior import Normalizer
from controlplane.controllers.podautoscaler.status import (
    milli_quantity,
    ordered,
    resource_status,
    set_condition,
)
from kubeclient.errors import ApiError
from kubeclient.informer import by_namespace, split_key
from kubeclient.quantity import milli_value
from kubeclient.selectors import SelectorError, parse_labels

log = logging.getLogger("controlplane.controllers.podautoscaler")
Obj = dict[str, Any]
SYNC_PERIOD = 15.0
# The scalable kinds this control plane serves (upstream asks the RESTMapper).
RESOURCES = {
    "Deployment": "deployments",
    "ReplicaSet": "replicasets",
    "StatefulSet": "statefulsets",
    "ReplicationController": "replicationcontrollers",
}


class MetricFailure(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class Proposal:
    replicas: int
    name: str
    status: Obj


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def scale_path(namespace: str, ref: Obj) -> str | None:
    kind = ref.get("kind", "")
    api_version = ref.get("apiVersion") or ("v1" if kind == "ReplicationController" else "apps/v1")
    resource = RESOURCES.get(kind)
    if resource is None:
        return None
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    return f"{base}/namespaces/{namespace}/{resource}/{ref.get('name', '')}/scale"


class HorizontalPodAutoscalerController(Controller):
    name = "horizontalpodautoscaling"
    account = "horizontal-pod-autoscaler"

    def __init__(self, ctx: ControllerContext, clock: Any = time.monotonic) -> None:
        super().__init__(ctx)
        self.recorder = ctx.recorder("horizontal-pod-autoscaler")
        self.sync_period = float(ctx.option("horizontal_pod_autoscaler_sync_period", SYNC_PERIOD))
        self.tolerance = float(ctx.option("horizontal_pod_autoscaler_tolerance", calc.TOLERANCE))
        self.periods = {
            "cpu_initialization_period": float(
                ctx.option(
                    "horizontal_pod_autoscaler_cpu_initialization_period", calc.CPU_INITIALIZATION_PERIOD
                )
            ),
            "initial_readiness_delay": float(
                ctx.option("horizontal_pod_autoscaler_initial_readiness_delay", calc.INITIAL_READINESS_DELAY)
            ),
        }
        self.clock = clock
        self.normalizer = Normalizer(
            clock,
            float(ctx.option("horizontal_pod_autoscaler_downscale_stabilization", 300.0)),
        )
        self._last: dict[str, float] = {}
        self.hpas = ctx.informers.get("/apis/autoscaling/v2/horizontalpodautoscalers")
        self.pods = ctx.informers.get("/api/v1/pods", indexers={"namespace": by_namespace})
        self.hpas.add_handler(on_add=self.enqueue, on_delete=self._deleted)

    def _deleted(self, hpa: Obj) -> None:
        self.enqueue(hpa)

    async def sync(self, key: str) -> None:
        hpa = self.hpas.get(key)
        if hpa is None:
            self.normalizer.forget(key)
            self._last.pop(key, None)
            return
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last < self.sync_period / 2:
            return  # a second chain of resyncs (a re-created object): this one ends here
        self._last[key] = now
        try:
            await self.reconcile(key, copy.deepcopy(hpa))
        finally:
            self.queue.add_after(key, self.sync_period)  # upstream's resync-period rate limiter

    # --- one pass ------------------------------------------------------------------------------------

    async def reconcile(self, key: str, hpa: Obj) -> None:
        namespace, _ = split_key(key)
        spec = hpa.get("spec") or {}
        old_status = copy.deepcopy(hpa.get("status") or {})
        conditions: list[Obj] = copy.deepcopy(old_status.get("conditions") or [])
        now = _now()
        path = scale_path(namespace, spec.get("scaleTargetRef") or {})
        scale = await self._get_scale(hpa, path, old_status, conditions, now)
        if scale is None or path is None:
            return
        current = int((scale.get("spec") or {}).get("replicas") or 0)
        self.normalizer.record_initial(key, current)
        statuses: list[Obj] = []
        decided = await self._desired(key, hpa, scale, current, conditions, now, statuses)
        if decided is None:  # no valid metric: the replica count stays, the status says why
            status = {
                **old_status,
                "currentReplicas": current,
                "currentMetrics": statuses or None,
                "conditions": ordered(conditions),
            }
            await self._write_status(hpa, old_status, status)
            return
        desired, reason, rescale = decided
        last_scale = old_status.get("lastScaleTime")
        if rescale:
            if not await self._rescale(key, hpa, path, scale, current, desired, reason, conditions, now):
                status = {
                    **old_status,
                    "currentReplicas": current,
                    "currentMetrics": statuses or None,
                    "conditions": ordered(conditions),
                }
                await self._write_status(hpa, old_status, status)
                return
            last_scale = now
        else:
            desired = current
        status = {
            "observedGeneration": (hpa.get("metadata") or {}).get("generation"),
            "lastScaleTime": last_scale,
            "currentReplicas": current,
            "desiredReplicas": desired,
            "currentMetrics": statuses or None,
            "conditions": ordered(conditions),
        }
        await self._write_status(hpa, old_status, status)

    async def _get_scale(
        self, hpa: Obj, path: str | None, old_status: Obj, conditions: list[Obj], now: str
    ) -> Obj | None:
        """The target's Scale, or None after recording FailedGetScale."""
        ref = (hpa.get("spec") or {}).get("scaleTargetRef") or {}
        try:
            if path is None:
                raise ApiError(
                    404, "NotFound", f'no matches for kind "{ref.get("kind", "")}" in group ""', {}
                )
            scale = await self.client.get(path)
        except ApiError as err:
            self.recorder.event(hpa, "Warning", "FailedGetScale", err.message)
            message = f"the HPA controller was unable to get the target's current scale: {err.message}"
            set_condition(conditions, "AbleToScale", "False", "FailedGetScale", message, now)
            await self._write_status(hpa, old_status, {**old_status, "conditions": ordered(conditions)})
            log.info(
                "event=failed-get-scale hpa=%s/%s error=%s",
                hpa["metadata"]["namespace"],
                hpa["metadata"]["name"],
                err.message,
            )
            return None
        set_condition(
            conditions,
            "AbleToScale",
            "True",
            "SucceededGetScale",
            "the HPA controller was able to get the target's current scale",
            now,
        )
        return scale

    async def _desired(
        self,
        key: str,
        hpa: Obj,
        scale: Obj,
        current: int,
        conditions: list[Obj],
        now: str,
        statuses: list[Obj],
    ) -> tuple[int, str, bool] | None:
        """(desired replicas, the rescale reason, whether to rescale); None when no metric is valid."""
        spec = hpa.get("spec") or {}
        minimum, maximum = int(spec.get("minReplicas") or 1), int(spec.get("maxReplicas") or 0)
        if current == 0 and minimum != 0:
            set_condition(
                conditions,
                "ScalingActive",
                "False",
                "ScalingDisabled",
                "scaling is disabled since the replica count of the target is zero",
                now,
            )
            return 0, "", False
        if current > maximum:
            return maximum, "Current number of replicas above Spec.MaxReplicas", True
        if current < minimum:
            return minimum, "Current number of replicas below Spec.MinReplicas", True
        computed = await self.compute(hpa, scale, current, conditions, now, statuses)
        if computed is None:
            return None
        desired, metric = computed
        reason = (
            f"{metric} above target"
            if desired > current
            else "All metrics below target"
            if desired < current
            else ""
        )
        desired = self._normalize(key, hpa, conditions, current, desired, minimum, maximum, now)
        return desired, reason, desired != current

    def _normalize(
        self,
        key: str,
        hpa: Obj,
        conditions: list[Obj],
        current: int,
        desired: int,
        minimum: int,
        maximum: int,
        now: str,
    ) -> int:
        behavior = (hpa.get("spec") or {}).get("behavior")
        if behavior is None:
            decision = self.normalizer.normalize(key, current, desired, minimum, maximum)
        else:
            decision = self.normalizer.normalize_with_behavior(
                key, behavior, current, desired, minimum, maximum
            )
        set_condition(conditions, "AbleToScale", "True", decision.able_reason, decision.able_message, now)
        set_condition(
            conditions,
            "ScalingLimited",
            "True" if decision.limited else "False",
            decision.limited_reason,
            decision.limited_message,
            now,
        )
        return decision.replicas

    async def _rescale(
        self,
        key: str,
        hpa: Obj,
        path: str,
        scale: Obj,
        current: int,
        desired: int,
        reason: str,
        conditions: list[Obj],
        now: str,
    ) -> bool:
        """Write spec.replicas through /scale, with the event and condition upstream records either way."""
        body = copy.deepcopy(scale)
        body.setdefault("spec", {})["replicas"] = desired
        try:
            await self.client.replace(path, body)
        except ApiError as err:
            self.recorder.event(
                hpa,
                "Warning",
                "FailedRescale",
                f"New size: {desired}; reason: {reason}; error: {err.message}",
            )
            set_condition(
                conditions,
                "AbleToScale",
                "False",
                "FailedUpdateScale",
                f"the HPA controller was unable to update the target scale: {err.message}",
                now,
            )
            return False
        set_condition(
            conditions,
            "AbleToScale",
            "True",
            "SucceededRescale",
            f"the HPA controller was able to update the target scale to {desired}",
            now,
        )
        self.recorder.event(hpa, "Normal", "SuccessfulRescale", f"New size: {desired}; reason: {reason}")
        self.normalizer.store_scale_event(key, (hpa.get("spec") or {}).get("behavior"), current, desired)
        log.info("event=rescale hpa=%s from=%d to=%d reason=%r", key, current, desired, reason)
        return True

    async def _write_status(self, hpa: Obj, old: Obj, new: Obj) -> None:
        """updateStatusIfNeeded: only a changed status is written (unset fields dropped)."""
        status = {k: v for k, v in new.items() if v is not None}
        status.setdefault("desiredReplicas", 0)
        if status == old:
            return
        body = {**hpa, "status": status}
        meta = hpa["metadata"]
        await self.client.replace(
            f"/apis/autoscaling/v2/namespaces/{meta['namespace']}/horizontalpodautoscalers/{meta['name']}/status",
            body,
        )

    # --- the metrics ---------------------------------------------------------------------------------

    async def compute(
        self, hpa: Obj, scale: Obj, current: int, conditions: list[Obj], now: str, statuses: list[Obj]
    ) -> tuple[int, str] | None:
        """computeReplicasForMetrics: the highest proposal of the valid metrics; None (and the conditions
        and events upstream writes) when none is valid, or some are invalid and the rest would scale down."""
        selector_text = (scale.get("status") or {}).get("selector") or ""
        if not selector_text:
            self.recorder.event(hpa, "Warning", "SelectorRequired", "selector is required")
            set_condition(
                conditions,
                "ScalingActive",
                "False",
                "InvalidSelector",
                "the HPA target's scale is missing a selector",
                now,
            )
            return None
        try:
            selector = parse_labels(selector_text)
        except SelectorError as err:
            message = f"couldn't convert selector into a corresponding internal selector object: {err}"
            self.recorder.event(hpa, "Warning", "InvalidSelector", message)
            set_condition(conditions, "ScalingActive", "False", "InvalidSelector", message, now)
            return None
        namespace = hpa["metadata"]["namespace"]
        pods = [
            p
            for p in self.pods.by_index("namespace", namespace)
            if selector.matches(p["metadata"].get("labels"))
        ]
        specs = (hpa.get("spec") or {}).get("metrics") or []
        best: Proposal | None = None
        invalid, first_error, invalid_reason = 0, "", ""
        for metric in specs:
            try:
                proposal = await self._compute_one(
                    metric,
                    current,
                    namespace,
                    selector_text,
                    pods,
                    int((scale.get("status") or {}).get("replicas") or 0),
                )
            except MetricFailure as err:
                invalid += 1
                statuses.append({"type": ""})
                self.recorder.event(hpa, "Warning", err.reason, str(err))
                if not first_error:
                    first_error, invalid_reason = str(err), err.reason
                continue
            statuses.append(proposal.status)
            if best is None or proposal.replicas > best.replicas:
                best = proposal
        if best is None or (invalid > 0 and best.replicas < current):
            set_condition(
                conditions,
                "ScalingActive",
                "False",
                invalid_reason,
                f"the HPA was unable to compute the replica count: {first_error}",
                now,
            )
            self.recorder.event(
                hpa,
                "Warning",
                "FailedComputeMetricsReplicas",
                f"invalid metrics ({invalid} invalid out of {len(specs)}), first error is: {first_error}",
            )
            return None
        set_condition(
            conditions,
            "ScalingActive",
            "True",
            "ValidMetricFound",
            f"the HPA was able to successfully calculate a replica count from {best.name}",
            now,
        )
        return best.replicas, best.name

    async def _compute_one(
        self,
        metric: Obj,
        current: int,
        namespace: str,
        selector: str,
        pods: list[Obj],
        status_replicas: int | None = None,
    ) -> Proposal:
        kind = metric.get("type", "")
        if kind in ("Pods", "Object", "External"):
            return await self._compute_custom(
                metric, kind, current, status_replicas, namespace, selector, pods
            )
        field = "resource" if kind == "Resource" else "containerResource"
        source = metric.get(field) or {}
        resource, container = (
            source.get("name", ""),
            source.get("container", "") if kind == "ContainerResource" else "",
        )
        target = source.get("target") or {}
        failed = "FailedGetResourceMetric" if kind == "Resource" else "FailedGetContainerResourceMetric"
        label = f"{resource} resource" if kind == "Resource" else f"{resource} container resource"
        try:
            pod_metrics = await metricsclient.fetch(self.client, namespace, selector, resource, container)
        except metricsclient.MetricsError as err:
            what = "usage" if target.get("averageValue") is not None else "utilization"
            raise MetricFailure(
                failed,
                f"failed to get {resource} {what}: unable to get metrics for resource {resource}: {err}",
            ) from None
        wall = datetime.now(UTC)
        try:
            if target.get("averageValue") is not None:
                result = calc.raw_resource_replicas(
                    current,
                    milli_value(target["averageValue"]),
                    resource,
                    pods,
                    pod_metrics,
                    wall,
                    self.tolerance,
                    **self.periods,
                )
                return Proposal(result.replicas, label, resource_status(metric, result.raw_average, None))
            if target.get("averageUtilization") is not None:
                result = calc.resource_replicas(
                    current,
                    int(target["averageUtilization"]),
                    resource,
                    pods,
                    pod_metrics,
                    wall,
                    container,
                    self.tolerance,
                    **self.periods,
                )
                return Proposal(
                    result.replicas,
                    f"{label} utilization (percentage of request)",
                    resource_status(metric, result.raw_average, result.utilization),
                )
        except calc.ReplicaError as err:
            what = "usage" if target.get("averageValue") is not None else "utilization"
            raise MetricFailure(failed, f"failed to get {resource} {what}: {err}") from None
        raise MetricFailure(
            failed, "invalid resource metric source: neither a utilization target nor a value target was set"
        )

    async def _compute_custom(
        self,
        metric: Obj,
        kind: str,
        current: int,
        status_replicas: int | None,
        namespace: str,
        selector: str,
        pods: list[Obj],
    ) -> Proposal:
        """computeStatusForPodsMetric / ObjectMetric / ExternalMetric over the custom and external
        metrics APIs (custommetrics.py)."""
        field = kind[:1].lower() + kind[1:]
        source = metric.get(field) or {}
        ident = source.get("metric") or {}
        name, metric_selector = ident.get("name", ""), ident.get("selector")
        target = source.get("target") or {}
        client = custommetrics.CustomMetricsClient(self.client)
        statuses = status_replicas if status_replicas is not None else current
        wall = datetime.now(UTC)
        identifier = {"name": name, **({"selector": metric_selector} if metric_selector else {})}
        if kind == "Pods":
            try:
                values = await client.pod_metrics(name, namespace, selector, metric_selector)
                target_avg = milli_value(str(target.get("averageValue") or "0"))
                result = calc.raw_resource_replicas(
                    current, target_avg, "", pods, values, wall, self.tolerance, **self.periods
                )
            except (custommetrics.MetricsError, calc.ReplicaError) as err:
                raise MetricFailure("FailedGetPodsMetric", f"unable to get metric {name}: {err}") from None
            status = {
                "type": "Pods",
                "pods": {
                    "metric": identifier,
                    "current": {"averageValue": milli_quantity(result.raw_average)},
                },
            }
            return Proposal(result.replicas, f"pods metric {name}", status)
        if kind == "Object":
            described = source.get("describedObject") or {}
            resource = RESOURCES.get(described.get("kind", ""), described.get("kind", "").lower() + "s")
            group = (described.get("apiVersion") or "").rpartition("/")[0]
            try:
                usage, _ = await client.object_metric(
                    name,
                    namespace,
                    f"{resource}.{group}" if group else resource,
                    described.get("name", ""),
                    metric_selector,
                )
            except custommetrics.MetricsError as err:
                raise MetricFailure(
                    "FailedGetObjectMetric",
                    f"unable to get metric {name}: {described.get('kind', '')} on {namespace} {described.get('name', '')}/{err}",
                ) from None
            replicas, current_status = self._value_or_average(
                target, statuses, usage, current, pods, "FailedGetObjectMetric"
            )
            status = {
                "type": "Object",
                "object": {"metric": identifier, "describedObject": described, "current": current_status},
            }
            return Proposal(replicas, f"{described.get('kind', '')} metric {name}", status)
        try:
            values, _ = await client.external_metric(name, namespace, metric_selector)
        except custommetrics.MetricsError as err:
            raise MetricFailure(
                "FailedGetExternalMetric",
                f"unable to get external metric {namespace}/{name}/{_go_selector(metric_selector)}: {err}",
            ) from None
        usage = sum(values)
        replicas, current_status = self._value_or_average(
            target, statuses, usage, current, pods, "FailedGetExternalMetric"
        )
        status = {"type": "External", "external": {"metric": identifier, "current": current_status}}
        return Proposal(replicas, f"external metric {name}({_go_selector(metric_selector)})", status)

    def _value_or_average(
        self, target: Obj, statuses: int, usage: float, current: int, pods: list[Obj], reason: str
    ) -> tuple[int, Obj]:
        """An Object or External metric's replicas and current status: an AverageValue target divides
        the usage over the pods (per_pod_replicas), a Value target scales by usage/target (upstream's
        GetObjectMetricReplicas / GetExternalMetricReplicas share this arithmetic)."""
        try:
            if target.get("type") == "AverageValue" or (
                target.get("averageValue") is not None and target.get("value") is None
            ):
                replicas, per_pod = calc.per_pod_replicas(
                    statuses, usage, milli_value(str(target["averageValue"])), self.tolerance
                )
                return replicas, {"averageValue": milli_quantity(per_pod)}
            ratio = usage / milli_value(str(target.get("value") or "0"))
            replicas = calc.usage_ratio_replicas(current, ratio, pods, self.tolerance)
            return replicas, {"value": milli_quantity(usage)}
        except (calc.ReplicaError, ZeroDivisionError) as err:
            raise MetricFailure(reason, str(err)) from None


def _go_selector(selector: Obj | None) -> str:
    """A *metav1.LabelSelector as Go's %+v writes it (nil when absent)."""
    if not selector:
        return "nil"
    labels = ",".join(f"{k}: {v}," for k, v in sorted((selector.get("matchLabels") or {}).items()))
    return f"&LabelSelector{{MatchLabels:map[string]string{{{labels}}},MatchExpressions:[]LabelSelectorRequirement{{}},}}"
