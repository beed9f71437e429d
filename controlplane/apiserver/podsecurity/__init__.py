"""PodSecurity admission: the Pod Security Standards (privileged, baseline, restricted) at each policy
version, applied per namespace through its `pod-security.kubernetes.io/*` labels, as upstream's
pod-security-admission does. levels.py reads the labels, checks.py holds every check with upstream's
texts, config.py reads the AdmissionConfiguration's PodSecurityConfiguration, plugin.py is the admission
plugin the Namespace kind lists."""

from controlplane.apiserver.podsecurity.config import ConfigError, PodSecurityConfig, load
from controlplane.apiserver.podsecurity.plugin import PodSecurity

__all__ = ["ConfigError", "PodSecurity", "PodSecurityConfig", "load"]
