"""The ingress controller: Ingresses of its IngressClass served by a real nginx (README.md)."""
