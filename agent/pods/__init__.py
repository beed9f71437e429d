"""Pod lifecycle on this node: one worker per pod UID, sync against CRI, status reporting."""
