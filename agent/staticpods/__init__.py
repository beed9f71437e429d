"""Static pods: pods from manifest files on the node (staticPodPath), run by the agent's pod workers
without the API server, and shown in the API as mirror pods."""
