"""node.status.images as upstream's Images setter reports them: the largest 50 images, each with at
most 5 names (digests first, then tags)."""

from __future__ import annotations

from typing import Any

from agent.cri import CRIClient

MAX_NODE_IMAGES = 50  # upstream's nodeStatusMaxImages
MAX_NAMES_PER_IMAGE = 5  # upstream's MaxNamesPerImageInNodeStatus


def image_list(images: list[Any]) -> list[dict[str, Any]]:
    out = []
    for img in sorted(images, key=lambda i: i.size, reverse=True)[:MAX_NODE_IMAGES]:
        names = [*img.repo_digests, *img.repo_tags]
        if names:
            out.append({"names": names[:MAX_NAMES_PER_IMAGE], "sizeBytes": int(img.size)})
    return out


async def node_images(cri: CRIClient) -> list[dict[str, Any]]:
    return image_list(await cri.list_images())
