"""Switchyard on Ray Serve: an OpenAI-compatible ingress over N engine
replicas, KV-aware routing, autoscaling and prefill/decode disaggregation.

    from switchyard.ray import build_app
    serve.run(build_app(model="model-folder", num_replicas=2, router="prefix"))

See docs/python.md.
"""
from .app import build_app
from .replica import SwitchyardReplica
from .router import PrefixAwareRouter, RoundRobinRouter

__all__ = ["PrefixAwareRouter", "RoundRobinRouter", "SwitchyardReplica", "build_app"]
