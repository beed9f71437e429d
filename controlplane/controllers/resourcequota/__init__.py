"""The resource-quota controller (upstream's pkg/controller/resourcequota)."""

from controlplane.controllers.resourcequota.controller import ResourceQuotaController

__all__ = ["ResourceQuotaController"]
