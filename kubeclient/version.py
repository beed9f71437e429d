"""The Kubernetes version whose behaviour the project matches.

It is reported as the Node's kubeletVersion, by the API server's /version and discovery, in probe and
client User-Agents; one constant so every component claims the same release.
"""

KUBERNETES_VERSION = "v1.32.0"


def minor_version() -> tuple[str, str]:
    """("1", "32"): the major and minor parts, as /version and User-Agents spell them."""
    major, minor = (KUBERNETES_VERSION.lstrip("v").split(".") + ["0", "0"])[:2]
    return major, minor
