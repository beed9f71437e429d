"""The garbage collector: ownerReferences as a graph, and deletion that follows it (background,
foreground, orphan), as upstream's pkg/controller/garbagecollector."""
