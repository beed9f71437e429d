"""ImageService against containerd and the local registry: pulls go over HTTP to the registry for real."""

from __future__ import annotations

import pytest

from agent.cri import CRIClient, ImagePullError
from pykubelet.rig.images import RigImages

pytestmark = pytest.mark.integration


async def test_pull_status_list_remove(cri: CRIClient, test_images: RigImages) -> None:
    ref = await cri.pull_image(test_images.busybox_pinned)
    image = await cri.image_status(test_images.busybox_pinned)
    assert image is not None and image.id == ref and image.size > 0
    assert any(test_images.busybox_pinned in i.repo_tags for i in await cri.list_images())

    await cri.remove_image(test_images.busybox_pinned)
    assert await cri.image_status(test_images.busybox_pinned) is None
    await cri.remove_image(test_images.busybox_pinned)  # idempotent

    # Pulled again from the registry, the same content gives the same image id.
    assert await cri.pull_image(test_images.busybox_pinned) == ref


async def test_short_name_resolves_through_the_docker_io_mirror(cri: CRIClient) -> None:
    ref = await cri.pull_image("busybox")
    image = await cri.image_status("docker.io/library/busybox:latest")
    assert image is not None and image.id == ref


async def test_missing_image_carries_the_registry_reason(cri: CRIClient, test_images: RigImages) -> None:
    missing = f"{test_images.registry}/library/busybox:no-such-tag"
    with pytest.raises(ImagePullError) as info:
        await cri.pull_image(missing)
    assert info.value.image == missing
    assert "not found" in info.value.details
    assert await cri.image_status(missing) is None


async def test_missing_repository(cri: CRIClient, test_images: RigImages) -> None:
    with pytest.raises(ImagePullError) as info:
        await cri.pull_image(f"{test_images.registry}/nobody/nothing:1")
    assert "not found" in info.value.details
