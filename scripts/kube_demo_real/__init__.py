"""`scripts/kube-demo --app real`: the project's Go service on the cluster's real node, optimized for
real (modules: ``app`` the Deployment, the servo's connectors and the plan; ``prometheus`` the host
Prometheus scraping the pods; ``balancer`` the round-robin front to the pods' IPs; ``remeasure``
the repeated readings under the same load; ``demo`` the run)."""
