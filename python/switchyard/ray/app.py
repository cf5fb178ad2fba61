"""build_app: the Ray Serve application of a Switchyard deployment."""
from __future__ import annotations

from typing import Any, Dict, Optional

from ray import serve
from ray.serve.config import RequestRouterConfig

from .ingress import OpenAIIngress
from .replica import SwitchyardReplica

ROUTERS = {
    "prefix": "switchyard.ray.router:PrefixAwareRouter",
    "round_robin": "switchyard.ray.router:RoundRobinRouter",
}


def _router(name: str, stats_period_s: float) -> RequestRouterConfig:
    if name not in ROUTERS:
        raise ValueError(f"router must be one of {', '.join(ROUTERS)}, got {name!r}")
    # By import path: every process that routes imports it itself.
    return RequestRouterConfig(request_router_class=ROUTERS[name], request_routing_stats_period_s=stats_period_s)


def build_app(
    model: str,
    manifest: Optional[str] = None,
    profile: Optional[str] = "prefix",
    tokenizer: Optional[str] = None,
    chat_template: Optional[str] = None,
    model_name: Optional[str] = None,
    num_replicas: int = 1,
    autoscaling: Optional[Dict[str, Any]] = None,
    router: str = "prefix",
    threads: int = 1,
    replica_cpus: float = 1.0,
    max_ongoing_requests: int = 64,
    disaggregated: bool = False,
    prefill_replicas: int = 1,
    stats_period_s: float = 1.0,
    api_key: Optional[str] = None,
    max_tokens_limit: int = 4096,
    max_n: int = 8,
):
    """An OpenAI-compatible ingress over engine replicas.

    model/manifest/profile/tokenizer/chat_template: as switchyard.Engine
    (profile "prefix": the default manifest's prefix-caching profile).
    autoscaling: Ray Serve's autoscaling_config (min_replicas,
    max_replicas, target_ongoing_requests, ...) instead of num_replicas.
    router: "prefix" (KV-aware) or "round_robin". disaggregated: a prefill
    deployment computes prompts and passes their KV blocks through Ray's
    object store to the decode deployment. api_key, max_tokens_limit,
    max_n: as `switchyard serve`'s --api-key, --max-tokens-limit, --max-n
    (model_name: its --model-name; "" or None: the model's own name).
    """
    engine_args = {"model": model, "manifest": manifest, "profile": profile, "threads": threads, "tokenizer": tokenizer,
                   "chat_template": chat_template}
    protocol = {"model_name": model_name or "", "max_tokens_limit": max_tokens_limit, "max_n": max_n}
    scale = {"autoscaling_config": autoscaling} if autoscaling else {"num_replicas": num_replicas}
    replica = serve.deployment(
        SwitchyardReplica,
        name="SwitchyardDecode" if disaggregated else "SwitchyardEngine",
        ray_actor_options={"num_cpus": replica_cpus},
        max_ongoing_requests=max_ongoing_requests,
        request_router_config=_router(router, stats_period_s),
        health_check_period_s=2.0,
        **scale,
    )
    prefill = None
    if disaggregated:
        prefill = serve.deployment(
            SwitchyardReplica,
            name="SwitchyardPrefill",
            ray_actor_options={"num_cpus": replica_cpus},
            max_ongoing_requests=max_ongoing_requests,
            request_router_config=_router(router, stats_period_s),
            num_replicas=prefill_replicas,
        ).bind(engine_args, protocol)
    ingress = serve.deployment(OpenAIIngress, name="OpenAIIngress", ray_actor_options={"num_cpus": 0})
    deployments = ["SwitchyardDecode", "SwitchyardPrefill"] if disaggregated else ["SwitchyardEngine"]
    return ingress.bind(replica.bind(engine_args, protocol), tokenizer or _folder(model), chat_template, prefill,
                        api_key=api_key, deployments=deployments)


def _folder(model: str) -> str:
    """The folder holding the model's tokenizer (a model file's folder)."""
    import os

    return os.path.dirname(os.path.abspath(model)) if model.endswith(".onnx") else model
