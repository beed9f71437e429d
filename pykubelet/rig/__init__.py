"""The rig: install, start and tear down the real parts (containerd, registry, images, servers).

Tests, e2e, benchmarks and `pykubelet up` all use these helpers, so there is one way to run each daemon
and one owner that stops it and cleans up after it.
"""
